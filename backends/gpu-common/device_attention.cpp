#include "device_attention.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "device_store.hpp"
#include "kvcache/paging/attention_plan.hpp"
#include "staging_layout.hpp"

namespace kvcache::gpu {
DeviceAttention::DeviceAttention(int device)
    : processors_(static_cast<std::uint32_t>(device_properties(device).processors)) {}

void DeviceAttention::decode(CacheStore& store, const AttentionRequest& request) {
  run(store, request, false);
}

void DeviceAttention::prefill(CacheStore& store, const AttentionRequest& request) {
  run(store, request, true);
}

void DeviceAttention::run(CacheStore& base, const AttentionRequest& r, bool prefill) {
  auto* store = dynamic_cast<DeviceStore*>(&base);
  if (store == nullptr)
    throw Error(Code::unsupported,
                std::string(kVendor) + " attention reads " + kVendor + " stores only");
  const auto lock = store->lock();
  paging::PageBook& book = store->book();
  const paging::AttentionPlan plan = paging::plan_attention(book, r, prefill);
  const ModelShape& model = book.spec().model;
  const std::uint32_t heads = model.q_heads, kv_heads = model.kv_heads, dim = model.head_dim;
  const std::uint32_t group = heads / kv_heads;
  const Stream& stream = store->stream();
  const TensorView q = view_of(*r.q, plan.queries, heads, dim, stream.device(), "q");
  const TensorView out = view_of(*r.out, plan.queries, heads, dim, stream.device(), "out");
  if (plan.queries == 0) return;

  // The plan as flat arrays.
  std::vector<std::uint32_t> pages, span_offset{0};
  std::vector<std::uint64_t> spans, page_offset, logit_offset{0}, score_offset;
  std::vector<std::uint64_t> sequence_pages, sequence_scores;  // per sequence
  std::uint64_t score_floats = 0;
  for (std::size_t i = 0; i < r.sequences.size(); ++i) {
    const auto& s = book.find(r.sequences[i]);
    sequence_pages.push_back(pages.size());
    pages.insert(pages.end(), s.pages.begin(), s.pages.end());
    sequence_scores.push_back(score_floats);
    score_floats += plan.written[i];
  }
  // Formats that group tokens: the rows of groups still being filled, from the host residual.
  const bool grouped = book.token_group(false) != 0 || book.token_group(true) != 0;
  std::vector<std::uint64_t> held_from, residual_offset, sequence_residual;
  std::vector<std::uint16_t> residual;
  for (std::size_t i = 0; grouped && i < r.sequences.size(); ++i) {
    const auto& s = book.find(r.sequences[i]);
    for (const bool value : {false, true}) {
      const std::uint64_t slice = std::uint64_t{kv_heads} * book.token_group(value) * dim;
      sequence_residual.push_back(residual.size());
      const std::vector<std::uint16_t>& rows = value ? s.residual_v : s.residual_k;
      residual.insert(residual.end(), rows.begin() + r.layer * slice,
                      rows.begin() + (r.layer + 1) * slice);
    }
  }
  std::uint64_t max_visible = 0;
  for (std::uint64_t i = 0; i < plan.queries; ++i) {
    for (const bool value : {false, true}) {
      if (!grouped) break;
      const std::size_t seq = plan.query_sequence[i];
      held_from.push_back(book.token_group(value) == 0
                              ? ~std::uint64_t{0}
                              : book.held_from(book.find(r.sequences[seq]), r.layer, value));
      residual_offset.push_back(sequence_residual[2 * seq + value]);
    }
    page_offset.push_back(sequence_pages[plan.query_sequence[i]]);
    score_offset.push_back(sequence_scores[plan.query_sequence[i]]);
    for (const paging::SlotSpan& s : plan.visible[i]) {
      spans.push_back(s.begin);
      spans.push_back(s.end);
    }
    span_offset.push_back(static_cast<std::uint32_t>(spans.size() / 2));
    const std::uint64_t n = plan.visible_slots(i);
    logit_offset.push_back(logit_offset.back() + n);
    max_visible = std::max(max_visible, n);
  }

  // Work items: enough for several waves of blocks on every multiprocessor (so the last wave's
  // idle tail is short), none under kItemSlots slots.
  const std::uint32_t head_chunks = (group + kMaxItemHeads - 1) / kMaxItemHeads;
  const std::uint64_t pairs = plan.queries * kv_heads * head_chunks;
  const std::uint64_t target = 16ull * processors_;
  const std::uint64_t splits = pairs >= target ? 1 : (target + pairs - 1) / pairs;
  std::vector<WorkItem> items;
  std::vector<std::uint32_t> first_item;
  for (std::uint64_t i = 0; i < plan.queries; ++i) {
    const std::uint64_t n = plan.visible_slots(i);
    const std::uint64_t chunk = std::max<std::uint64_t>(kItemSlots, (n + splits - 1) / splits);
    for (std::uint32_t h = 0; h < kv_heads; ++h) {
      first_item.push_back(static_cast<std::uint32_t>(items.size()));
      for (std::uint32_t head0 = 0; head0 < group; head0 += kMaxItemHeads)
        for (std::uint64_t first = 0; first < n; first += chunk)
          items.push_back({static_cast<std::uint32_t>(i), h, head0,
                           std::min(kMaxItemHeads, group - head0),
                           static_cast<std::uint32_t>(first),
                           static_cast<std::uint32_t>(std::min(chunk, n - first))});
    }
  }
  first_item.push_back(static_cast<std::uint32_t>(items.size()));

  StagingLayout layout;
  const std::uint64_t pages_at = layout.copy(pages), page_offset_at = layout.copy(page_offset),
                      span_offset_at = layout.copy(span_offset), spans_at = layout.copy(spans),
                      items_at = layout.copy(items), first_item_at = layout.copy(first_item),
                      logit_offset_at = layout.copy(logit_offset),
                      score_offset_at = layout.copy(score_offset),
                      held_from_at = layout.copy(held_from), residual_at = layout.copy(residual),
                      residual_offset_at = layout.copy(residual_offset);
  const std::uint64_t q_at = q.on_device ? 0 : layout.reserve(q.bytes);
  const std::uint64_t out_at = out.on_device ? 0 : layout.reserve(out.bytes);
  const std::uint64_t partial_at = layout.reserve(items.size() * kMaxItemHeads * (2 + dim) * 4);
  const std::uint64_t final_at = layout.reserve(plan.queries * heads * 2 * 4);
  const bool scores = r.accumulate_scores;
  const std::uint64_t logits_at = scores ? layout.reserve(logit_offset.back() * heads * 4) : 0;
  const std::uint64_t scores_at = scores ? layout.reserve(score_floats * 4) : 0;
  auto* device = static_cast<std::uint8_t*>(work_.reserve(layout.size()));
  const auto at = [&](std::uint64_t offset) { return device + offset; };

  stream.activate();
  stream.upload(device, layout.host().data(), layout.host().size());
  if (!q.on_device) stream.upload(at(q_at), q.data, q.bytes);
  if (scores) stream.fill(at(scores_at), 0, score_floats * 4);

  AttentionArgs a;
  a.pools = store->pools();
  a.layer = r.layer;
  a.page_size = book.page_size();
  a.q_heads = heads;
  a.scale = (r.scale > 0.0f ? r.scale : 1.0f / std::sqrt(static_cast<float>(dim))) *
            std::numbers::log2e_v<float>;
  a.q = q.on_device ? q.data : at(q_at);
  a.q_dtype = q.dtype;
  a.pages = reinterpret_cast<const std::uint32_t*>(at(pages_at));
  a.page_offset = reinterpret_cast<const std::uint64_t*>(at(page_offset_at));
  a.span_offset = reinterpret_cast<const std::uint32_t*>(at(span_offset_at));
  a.spans = reinterpret_cast<const std::uint64_t*>(at(spans_at));
  a.items = reinterpret_cast<const WorkItem*>(at(items_at));
  a.n_items = static_cast<std::uint32_t>(items.size());
  a.partial = reinterpret_cast<float*>(at(partial_at));
  a.logits = scores ? reinterpret_cast<float*>(at(logits_at)) : nullptr;
  a.logit_offset = reinterpret_cast<const std::uint64_t*>(at(logit_offset_at));
  if (grouped) {
    a.held_from = reinterpret_cast<const std::uint64_t*>(at(held_from_at));
    a.residual = reinterpret_cast<const std::uint16_t*>(at(residual_at));
    a.residual_offset = reinterpret_cast<const std::uint64_t*>(at(residual_offset_at));
  }
  launch_attend(a, std::min(group, kMaxItemHeads), stream.get());

  MergeArgs m;
  m.queries = static_cast<std::uint32_t>(plan.queries);
  m.q_heads = heads;
  m.kv_heads = kv_heads;
  m.head_dim = dim;
  m.items = a.items;
  m.first_item = reinterpret_cast<const std::uint32_t*>(at(first_item_at));
  m.partial = a.partial;
  void* out_device = out.on_device ? const_cast<void*>(out.data) : at(out_at);
  m.out = out_device;
  m.out_dtype = out.dtype;
  m.final_state = reinterpret_cast<float*>(at(final_at));
  launch_merge(m, stream.get());

  std::vector<float> added;
  if (scores) {
    ScoreArgs s;
    s.queries = m.queries;
    s.q_heads = heads;
    s.span_offset = a.span_offset;
    s.spans = a.spans;
    s.logit_offset = a.logit_offset;
    s.max_visible = max_visible;
    s.logits = a.logits;
    s.final_state = m.final_state;
    s.scores = reinterpret_cast<float*>(at(scores_at));
    s.score_offset = reinterpret_cast<const std::uint64_t*>(at(score_offset_at));
    launch_scores(s, stream.get());
    added.resize(score_floats);
    stream.download(added.data(), s.scores, score_floats * 4);
  }
  if (!out.on_device)
    stream.download(static_cast<std::byte*>(r.out->data) + r.out->byte_offset, out_device,
                    out.bytes);
  stream.synchronize();
  // Scores live with the book on the host, where eviction policies read them.
  for (std::size_t i = 0; scores && i < r.sequences.size(); ++i) {
    auto& s = book.find(r.sequences[i]);
    for (std::uint64_t slot = 0; slot < plan.written[i]; ++slot)
      s.scores[slot] += added[sequence_scores[i] + slot];
  }
}

}  // namespace kvcache::gpu
