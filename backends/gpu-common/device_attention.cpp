#include "device_attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <numbers>
#include <string>
#include <vector>

#include "device_store.hpp"
#include "kvcache/paging/attention_plan.hpp"
#include "staging_layout.hpp"

namespace kvcache::gpu {
// A step's plan on the device: what does not depend on the layer (pages, slot spans, work items,
// offsets), laid out and uploaded once; the layers' runs reuse it.
struct DevicePlan final : StepPlan {
  const DeviceStore* store = nullptr;
  std::optional<EngineStream> engine;  // the engine's stream for every call of the step
  paging::AttentionPlan slots;
  bool accumulate_scores = false;
  float scale = 0.0f;
  std::uint32_t n_items = 0;
  std::uint64_t max_visible = 0, score_floats = 0, logits = 0;
  std::vector<std::uint64_t> sequence_scores;  // per sequence: its first score in the download
  StagingLayout layout;                        // kept: the upload reads it asynchronously
  std::unique_ptr<StreamBuffer> memory;        // freed in the stream's order, after the step
  std::uint64_t pages_at = 0, page_offset_at = 0, span_offset_at = 0, spans_at = 0, items_at = 0,
                first_item_at = 0, arrived_at = 0, logit_offset_at = 0, score_offset_at = 0;
  // Query rotations (positions within the cache): how many, and their query and angles.
  std::uint32_t rotations = 0;
  std::uint64_t rotation_query_at = 0, cos_sin_at = 0;
  std::uint8_t* at(std::uint64_t offset) const { return memory->as<std::uint8_t>() + offset; }
};

// Queries and outputs in pageable host memory of up to this size pass through the attention's
// page-locked buffer, so that their copies are asynchronous (a decode step's, up to batch 256 at
// Llama-3-8B's heads in float32); larger ones, prefill's, are copied from where they are.
constexpr std::uint64_t kStagedBytes = 4u << 20;

DeviceAttention::DeviceAttention(int device)
    : processors_(static_cast<std::uint32_t>(device_properties(device).processors)) {}

namespace {

DeviceStore& device_store(CacheStore& base) {
  auto* store = dynamic_cast<DeviceStore*>(&base);
  if (store == nullptr)
    throw Error(Code::unsupported,
                std::string(kVendor) + " attention reads " + kVendor + " stores only");
  return *store;
}

const DevicePlan& device_plan(const DeviceStore& store, const StepPlan& step, const char* call) {
  const auto* plan = dynamic_cast<const DevicePlan*>(&step);
  if (plan == nullptr || plan->store != &store)
    throw Error(Code::invalid_argument,
                std::string(call) + ": the plan was made for another store or attention");
  return *plan;
}

// Formats that group tokens: per query and K/V, the first slot whose row waits in the residual
// and where its sequence's rows of `layer` start in `rows` (fp16, the group being filled).
struct HeldRows {
  std::vector<std::uint64_t> from, offset;
  std::vector<std::uint16_t> rows;
};

HeldRows held_rows(const paging::PageBook& book, const paging::AttentionPlan& plan,
                   std::uint32_t layer) {
  HeldRows held;
  std::vector<std::uint64_t> sequence_residual;
  const std::uint32_t kv_heads = book.spec().model.kv_heads, dim = book.spec().model.head_dim;
  for (std::size_t i = 0; i < plan.sequences.size(); ++i) {
    const auto& s = book.find(plan.sequences[i]);
    for (const bool value : {false, true}) {
      const std::uint32_t g = book.token_group(value);
      const std::uint64_t slice = std::uint64_t{kv_heads} * g * dim;
      sequence_residual.push_back(held.rows.size());
      if (g == 0) continue;
      // The rows of the group being filled: the book's half of that group's parity.
      const std::uint64_t parity = book.held_from(s, layer, value) / g % 2;
      const std::vector<std::uint16_t>& rows = value ? s.residual_v : s.residual_k;
      const auto first = rows.begin() + static_cast<std::ptrdiff_t>(
                                            (parity * book.spec().model.layers + layer) * slice);
      held.rows.insert(held.rows.end(), first, first + static_cast<std::ptrdiff_t>(slice));
    }
  }
  for (std::uint64_t i = 0; i < plan.queries; ++i) {
    for (const bool value : {false, true}) {
      const std::size_t seq = plan.query_sequence[i];
      held.from.push_back(book.token_group(value) == 0
                              ? ~std::uint64_t{0}
                              : book.held_from(book.find(plan.sequences[seq]), layer, value));
      held.offset.push_back(sequence_residual[2 * seq + value]);
    }
  }
  return held;
}

// Scores live with the book on the host, where eviction policies read them: what a layer added.
void add_scores(paging::PageBook& book, const paging::AttentionPlan& plan,
                const std::vector<std::uint64_t>& sequence_scores,
                const std::vector<float>& added) {
  for (std::size_t i = 0; i < plan.sequences.size(); ++i) {
    auto& s = book.find(plan.sequences[i]);
    for (std::uint64_t slot = 0; slot < plan.written[i]; ++slot)
      s.scores[slot] += added[sequence_scores[i] + slot];
  }
}

// A plan's work items, in merge units (query, KV head, head chunk), each unit's first item, and
// the query each rotation turns.
struct WorkItems {
  std::vector<WorkItem> items;
  std::vector<std::uint32_t> first_item;
  std::vector<std::uint32_t> rotation_query;
};

WorkItems work_items(const paging::AttentionPlan& plan, std::uint32_t kv_heads, std::uint32_t group,
                     std::uint64_t splits) {
  // An item turns its query one way throughout: a query's visible slots are cut where the
  // spans' rotations change, [begin, end) of its visible indices each.
  struct Run {
    std::uint64_t begin, end;
    std::uint32_t rotation;
  };
  WorkItems w;
  std::vector<WorkItem>& items = w.items;
  std::vector<std::uint32_t>& first_item = w.first_item;
  std::vector<std::uint32_t>& rotation_query = w.rotation_query;
  rotation_query.assign(plan.rotation_count(), 0);
  for (std::uint64_t i = 0; i < plan.queries; ++i) {
    const std::uint64_t n = plan.visible_slots(i);
    const std::uint64_t chunk = std::max<std::uint64_t>(kItemSlots, (n + splits - 1) / splits);
    std::vector<Run> runs;
    std::uint64_t at = 0;
    for (const paging::SlotSpan& s : plan.visible[i]) {
      if (runs.empty() || runs.back().rotation != s.rotation) runs.push_back({at, at, s.rotation});
      at += s.end - s.begin;
      runs.back().end = at;
      if (s.rotation != 0) rotation_query[s.rotation - 1] = static_cast<std::uint32_t>(i);
    }
    // Merge units (query, KV head, head chunk) in order: merge::unit_of computes the same index.
    // A query that sees nothing still gets an item per unit (of no slots), which writes its zeros.
    for (std::uint32_t h = 0; h < kv_heads; ++h)
      for (std::uint32_t head0 = 0; head0 < group; head0 += kMaxItemHeads) {
        first_item.push_back(static_cast<std::uint32_t>(items.size()));
        const auto item = [&](std::uint64_t first, std::uint64_t count, std::uint32_t rotation) {
          items.push_back(
              {static_cast<std::uint32_t>(i), h, head0, std::min(kMaxItemHeads, group - head0),
               static_cast<std::uint32_t>(first), static_cast<std::uint32_t>(count), rotation});
        };
        if (runs.empty()) item(0, 0, 0);
        for (const Run& run : runs)
          for (std::uint64_t first = run.begin; first < run.end; first += chunk)
            item(first, std::min(chunk, run.end - first), run.rotation);
      }
  }
  return w;
}

// Positions within the cache: each rotation's query turned into `turned`, before the attention.
float* rotate_queries(const DevicePlan& p, const AttentionArgs& a, float* turned,
                      const StreamView& stream) {
  const paging::AttentionPlan& plan = p.slots;
  RotateArgs r;
  r.q = a.q;
  r.q_dtype = a.q_dtype;
  r.q_heads = a.q_heads;
  r.head_dim = a.pools.head_dim;
  r.rotary_dims = plan.rotary_dims;
  r.adjacent = plan.rotation_style == RopeStyle::gptj;
  r.rotations = p.rotations;
  r.query_of = reinterpret_cast<const std::uint32_t*>(p.at(p.rotation_query_at));
  r.cos_sin = reinterpret_cast<const float*>(p.at(p.cos_sin_at));
  r.turned = turned;
  launch_rotate(r, stream.get());
  return turned;
}

// Accumulated scores: each slot's weights summed over the heads into `scores`, after the
// attention, and downloaded.
std::vector<float> score_pass(const DevicePlan& p, const AttentionArgs& a, float* scores,
                              const StreamView& stream) {
  ScoreArgs s;
  s.queries = static_cast<std::uint32_t>(p.slots.queries);
  s.q_heads = a.q_heads;
  s.span_offset = a.span_offset;
  s.spans = a.spans;
  s.logit_offset = a.logit_offset;
  s.max_visible = p.max_visible;
  s.logits = a.logits;
  s.final_state = a.final_state;
  s.scores = scores;
  s.score_offset = reinterpret_cast<const std::uint64_t*>(p.at(p.score_offset_at));
  launch_scores(s, stream.get());
  std::vector<float> added(p.score_floats);
  stream.download(added.data(), s.scores, p.score_floats * 4);
  return added;
}

}  // namespace

std::unique_ptr<DevicePlan> DeviceAttention::make_plan(DeviceStore& store,
                                                       paging::AttentionPlan slots,
                                                       const StepRequest& request) const {
  const paging::PageBook& book = store.book();
  const ModelShape& model = book.spec().model;
  const std::uint32_t kv_heads = model.kv_heads, group = model.q_heads / kv_heads;
  auto p = std::make_unique<DevicePlan>();
  p->store = &store;
  p->engine = request.stream;
  p->accumulate_scores = request.accumulate_scores;
  p->scale = request.scale;
  const paging::AttentionPlan& plan = slots;
  // The plan as flat arrays.
  std::vector<std::uint32_t> pages, span_offset{0};
  std::vector<std::uint64_t> spans, page_offset, logit_offset{0}, score_offset;
  std::vector<std::uint64_t> sequence_pages;  // per sequence
  for (std::size_t i = 0; i < plan.sequences.size(); ++i) {
    const auto& s = book.find(plan.sequences[i]);
    sequence_pages.push_back(pages.size());
    pages.insert(pages.end(), s.pages.begin(), s.pages.end());
    p->sequence_scores.push_back(p->score_floats);
    p->score_floats += plan.written[i];
  }
  for (std::uint64_t i = 0; i < plan.queries; ++i) {
    page_offset.push_back(sequence_pages[plan.query_sequence[i]]);
    score_offset.push_back(p->sequence_scores[plan.query_sequence[i]]);
    for (const paging::SlotSpan& s : plan.visible[i]) {
      spans.push_back(s.begin);
      spans.push_back(s.end);
    }
    span_offset.push_back(static_cast<std::uint32_t>(spans.size() / 2));
    const std::uint64_t n = plan.visible_slots(i);
    logit_offset.push_back(logit_offset.back() + n);
    p->max_visible = std::max(p->max_visible, n);
  }
  p->logits = logit_offset.back();

  // Work items: enough for several waves of blocks on every multiprocessor (so the last wave's
  // idle tail is short), none under kItemSlots slots.
  const std::uint32_t head_chunks = (group + kMaxItemHeads - 1) / kMaxItemHeads;
  const std::uint64_t pairs = plan.queries * kv_heads * head_chunks;
  const std::uint64_t target = 16ull * processors_;
  const std::uint64_t splits =
      pairs >= target ? 1 : (target + pairs - 1) / std::max<std::uint64_t>(pairs, 1);
  WorkItems w = work_items(plan, kv_heads, group, splits);
  std::vector<WorkItem>& items = w.items;
  std::vector<std::uint32_t>& first_item = w.first_item;
  const std::vector<std::uint32_t>& rotation_query = w.rotation_query;
  const std::uint64_t units = first_item.size();
  first_item.push_back(static_cast<std::uint32_t>(items.size()));
  p->n_items = static_cast<std::uint32_t>(items.size());

  StagingLayout& layout = p->layout;
  p->pages_at = layout.copy(pages);
  p->page_offset_at = layout.copy(page_offset);
  p->span_offset_at = layout.copy(span_offset);
  p->spans_at = layout.copy(spans);
  p->items_at = layout.copy(items);
  p->first_item_at = layout.copy(first_item);
  p->logit_offset_at = layout.copy(logit_offset);
  p->score_offset_at = layout.copy(score_offset);
  p->rotations = static_cast<std::uint32_t>(rotation_query.size());
  if (p->rotations != 0) {
    p->rotation_query_at = layout.copy(rotation_query);
    p->cos_sin_at = layout.copy(plan.cos_sin);
  }
  p->arrived_at = layout.reserve(units * 4);
  const StreamView stream = store.enter(p->engine);
  stream.activate();
  p->memory = std::make_unique<StreamBuffer>(std::max<std::uint64_t>(layout.size(), 16), stream);
  stream.upload(p->at(0), layout.host().data(), layout.host().size());
  stream.fill(p->at(p->arrived_at), 0, units * 4);  // the merge's counters, kept at 0 by each run
  p->slots = std::move(slots);
  return p;
}

std::unique_ptr<StepPlan> DeviceAttention::plan(CacheStore& base, const StepRequest& r) {
  DeviceStore& store = device_store(base);
  const auto lock = store.lock();
  return make_plan(store, paging::plan_step(store.book(), r), r);
}

void DeviceAttention::run(CacheStore& base, const StepPlan& step, std::uint32_t layer,
                          const DLTensor& q, DLTensor& out) {
  DeviceStore& store = device_store(base);
  const DevicePlan& plan = device_plan(store, step, "run");
  const auto lock = store.lock();
  paging::check_step_layer(store.book(), plan.slots, layer, q, out);
  run_layer(store, plan, layer, q, out);
}

void DeviceAttention::finish(CacheStore& base, const StepPlan& step, void* event) {
  DeviceStore& store = device_store(base);
  const DevicePlan& plan = device_plan(store, step, "finish");
  if (!plan.engine) return;  // each call waited for its own work
  const auto lock = store.lock();
  const StreamView stream = store.enter(plan.engine);
  stream.activate();
  if (event != nullptr) {
    stream.record(event);
    return;
  }
  stream.synchronize();
  store.waited(stream);
}

// One layer on an uploaded plan: the rows of token groups still being filled (formats that group
// tokens), q and the scratch in the attention's own buffer, then one launch that attends and
// merges (and, when wanted, the rotated queries before it and the scores after it).
void DeviceAttention::run_layer(DeviceStore& store, const DevicePlan& p, std::uint32_t layer,
                                const DLTensor& q_in, DLTensor& out_in) {
  paging::PageBook& book = store.book();
  const paging::AttentionPlan& plan = p.slots;
  const ModelShape& model = book.spec().model;
  const std::uint32_t heads = model.q_heads, kv_heads = model.kv_heads, dim = model.head_dim;
  const std::uint32_t group = heads / kv_heads;
  const StreamView stream = store.enter(p.engine);
  const TensorView q = view_of(q_in, plan.queries, heads, dim, stream.device(), "q");
  const TensorView out = view_of(out_in, plan.queries, heads, dim, stream.device(), "out");
  if (plan.queries == 0) return;

  // Formats that group tokens: the rows of groups still being filled, from the host residual.
  const bool grouped = book.token_group(false) != 0 || book.token_group(true) != 0;
  const HeldRows held = grouped ? held_rows(book, plan, layer) : HeldRows{};
  StagingLayout layout;
  const std::uint64_t held_from_at = layout.copy(held.from), residual_at = layout.copy(held.rows),
                      residual_offset_at = layout.copy(held.offset);
  const std::uint64_t q_at = q.on_device ? 0 : layout.reserve(q.bytes);
  const std::uint64_t out_at = out.on_device ? 0 : layout.reserve(out.bytes);
  const std::uint64_t partial_at = layout.reserve(p.n_items * item_state_floats(dim) * 4, 128);
  const bool scores = p.accumulate_scores;
  const std::uint64_t final_at = scores ? layout.reserve(plan.queries * heads * 2 * 4) : 0;
  const std::uint64_t turned_at = layout.reserve(std::uint64_t{p.rotations} * heads * dim * 4);
  const std::uint64_t logits_at = scores ? layout.reserve(p.logits * heads * 4) : 0;
  const std::uint64_t scores_at = scores ? layout.reserve(p.score_floats * 4) : 0;
  auto* device = static_cast<std::uint8_t*>(store.scratch().reserve(layout.size()));
  const auto at = [&](std::uint64_t offset) { return device + offset; };

  const bool stage_q = !q.on_device && q.pageable && q.bytes <= kStagedBytes;
  const bool stage_out = !out.on_device && out.pageable && out.bytes <= kStagedBytes;
  const std::uint64_t staged_out_at = stage_q ? (q.bytes + 15) / 16 * 16 : 0;
  std::uint8_t* staging = stage_q || stage_out
                              ? store.pinned().reserve(staged_out_at + (stage_out ? out.bytes : 0))
                              : nullptr;
  // Should a launch or a copy fail midway, copies from or into the staging may still be in flight:
  // the stream is drained before the error leaves, so that the next call may reuse the buffer.
  struct DrainOnError {
    const StreamView& stream;
    int exceptions = std::uncaught_exceptions();
    ~DrainOnError() {
      if (std::uncaught_exceptions() > exceptions) (void)GPU(StreamSynchronize)(stream.get());
    }
  } drain{stream};
  stream.activate();
  stream.upload(device, layout.host().data(), layout.host().size());
  if (stage_q) {
    std::memcpy(staging, q.data, q.bytes);
    stream.upload(at(q_at), staging, q.bytes);
  } else if (!q.on_device) {
    stream.upload(at(q_at), q.data, q.bytes);
  }
  if (scores) stream.fill(at(scores_at), 0, p.score_floats * 4);

  AttentionArgs a;
  a.pools = store.pools();
  a.layer = layer;
  a.page_size = book.page_size();
  a.q_heads = heads;
  a.scale = (p.scale > 0.0f ? p.scale : 1.0f / std::sqrt(static_cast<float>(dim))) *
            std::numbers::log2e_v<float>;
  a.q = q.on_device ? q.data : at(q_at);
  a.q_dtype = q.dtype;
  a.pages = reinterpret_cast<const std::uint32_t*>(p.at(p.pages_at));
  a.page_offset = reinterpret_cast<const std::uint64_t*>(p.at(p.page_offset_at));
  a.span_offset = reinterpret_cast<const std::uint32_t*>(p.at(p.span_offset_at));
  a.spans = reinterpret_cast<const std::uint64_t*>(p.at(p.spans_at));
  a.items = reinterpret_cast<const WorkItem*>(p.at(p.items_at));
  a.n_items = p.n_items;
  a.partial = reinterpret_cast<float*>(at(partial_at));
  a.first_item = reinterpret_cast<const std::uint32_t*>(p.at(p.first_item_at));
  a.arrived = reinterpret_cast<std::uint32_t*>(p.at(p.arrived_at));
  void* out_device = out.on_device ? const_cast<void*>(out.data) : at(out_at);
  a.out = out_device;
  a.out_dtype = out.dtype;
  a.final_state = scores ? reinterpret_cast<float*>(at(final_at)) : nullptr;
  a.logits = scores ? reinterpret_cast<float*>(at(logits_at)) : nullptr;
  a.logit_offset = reinterpret_cast<const std::uint64_t*>(p.at(p.logit_offset_at));
  if (p.rotations != 0)
    a.turned = rotate_queries(p, a, reinterpret_cast<float*>(at(turned_at)), stream);
  if (grouped) {
    a.held_from = reinterpret_cast<const std::uint64_t*>(at(held_from_at));
    a.residual = reinterpret_cast<const std::uint16_t*>(at(residual_at));
    a.residual_offset = reinterpret_cast<const std::uint64_t*>(at(residual_offset_at));
  }
  launch_attend(a, std::min(group, kMaxItemHeads), stream.get());

  const std::vector<float> added =
      scores ? score_pass(p, a, reinterpret_cast<float*>(at(scores_at)), stream)
             : std::vector<float>();
  void* const out_host = static_cast<std::byte*>(out_in.data) + out_in.byte_offset;
  if (!out.on_device)
    stream.download(stage_out ? staging + staged_out_at : out_host, out_device, out.bytes);
  // On the engine's stream, device tensors wait for nothing: the engine's next kernel is ordered
  // after this one. Host tensors and scores are read on the host, and the staging is reused.
  if (p.engine && q.on_device && out.on_device && !scores) return;
  stream.synchronize();
  if (stage_out) std::memcpy(out_host, staging + staged_out_at, out.bytes);
  if (scores) add_scores(book, plan, p.sequence_scores, added);
}

}  // namespace kvcache::gpu
