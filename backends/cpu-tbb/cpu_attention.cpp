#include "cpu_attention.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <memory_resource>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "block16.hpp"
#include "head_groups.hpp"
#include "input_rows.hpp"
#include "kvcache/formats.hpp"
#include "kvcache/numeric.hpp"
#include "kvcache/paging/attention_plan.hpp"
#include "paged_store.hpp"
#include "query_tiles.hpp"
#include "softmax_block.hpp"
#include "work_schedule.hpp"

namespace kvcache::cpu {
namespace {

// Work (key slots times queries, over the KV heads) below which a call runs on the calling
// thread alone: decoding 64 int4 tokens x 8 KV heads took 21 us on one thread and 28 on two
// here, 256 tokens 55 and 44.
constexpr std::uint64_t kParallelWork = 1024;

// How far ahead of the rows being read their stream asks for tiles, in bytes of the rows of
// `kind`: at least two pages, and more for small tiles, so that a format read fast (int4: a
// 16-slot page of 1-1.3 KB in a few hundred ns) asks early enough to cover the memory's latency.
// int8 twice as far: on Zen 4, with the two distances taking turns call by call in one run, int8
// calls ran faster with 16 KB than with 8 (32768 tokens x 8 sequences: 6-13%, 32768 x 1: 2-11%,
// 4096 x 8: 2-4%, 4096 x 1: the same), where fp16 and bf16 ran no faster and int4 2-3% slower
// (and from 24 KB on, fp16 2-9% slower).
constexpr std::size_t prefetch_bytes(RowFormat kind) {
  return kind == RowFormat::int8 ? 16384 : 8192;
}

// Writes a float row into `out` (float32, float16 or bfloat16) at row index r.
void store_row(DLTensor& out, std::uint64_t index, const float* row, std::uint32_t dim) {
  auto* base = static_cast<std::byte*>(out.data) + out.byte_offset;
  if (out.dtype.code == kDLFloat && out.dtype.bits == 32) {
    std::copy_n(row, dim, reinterpret_cast<float*>(base) + index * dim);
    return;
  }
  auto* half = reinterpret_cast<std::uint16_t*>(base) + index * dim;
  for (std::uint32_t i = 0; i < dim; ++i)
    half[i] = out.dtype.code == kDLFloat ? fp16_from_float(row[i]) : bf16_from_float(row[i]);
}

// The plan checked the shape; the element type and the memory are this backend's to check.
void check_out(const DLTensor& out) {
  const bool dtype_ok =
      out.dtype.lanes == 1 &&
      ((out.dtype.code == kDLFloat && (out.dtype.bits == 32 || out.dtype.bits == 16)) ||
       (out.dtype.code == kDLBfloat && out.dtype.bits == 16));
  if (!dtype_ok || (out.device.device_type != kDLCPU && out.device.device_type != kDLCUDAHost))
    throw Error(Code::invalid_argument, "out must be a host float32/float16/bfloat16 tensor");
}

// A step's plan on cpu-tbb: the slots every query sees and the work schedule, for each layer.
struct CpuPlan final : StepPlan {
  const PagedStore* store = nullptr;  // the plan's: another store's sequences are others
  paging::AttentionPlan slots;
  WorkSchedule schedule;
  bool prefill = false;
  bool accumulate_scores = false;
  float scale = 0.0f;
};

PagedStore& cpu_store(CacheStore& base) {
  auto* store = dynamic_cast<PagedStore*>(&base);
  if (store == nullptr)
    throw Error(Code::unsupported, "cpu-tbb attention reads cpu-tbb stores only");
  return *store;
}

CpuPlan make_plan(const PagedStore& store, paging::AttentionPlan slots, bool prefill,
                  bool accumulate_scores, float scale) {
  const ModelShape& model = store.spec().model;
  CpuPlan plan;
  plan.store = &store;
  plan.prefill = prefill;
  plan.accumulate_scores = accumulate_scores;
  plan.scale = scale;
  const HeadGroups heads(model.q_heads / model.kv_heads, model.head_dim);
  plan.schedule =
      schedule_work(slots, {model.kv_heads * heads.parts, heads.width, model.head_dim,
                            static_cast<std::uint64_t>(tbb::this_task_arena::max_concurrency()),
                            prefill && !accumulate_scores});
  plan.slots = std::move(slots);
  return plan;
}

// One layer on a plan, under the store's shared lock: the queries scaled (and quantized for
// integer keys), every item's kernels, each pair's parts merged as its last one finishes, and
// the score pass when scores are accumulated.
void run_layer(PagedStore& store_ref, const CpuPlan& p, std::uint32_t layer, const DLTensor& q_in,
               DLTensor& out) {
  PagedStore* const store = &store_ref;
  const paging::AttentionPlan& plan = p.slots;
  const WorkSchedule& schedule = p.schedule;
  const ModelShape& model = store->spec().model;
  const std::uint32_t heads = model.q_heads, dim = model.head_dim, page = store->page_size();
  // The kernels' heads (see head_groups.hpp): `kv_heads` kernel heads of `group` query heads
  // each, kernel head h reading the K and V of the model's KV head h / hg.parts.
  const HeadGroups hg(heads / model.kv_heads, dim);
  const std::uint32_t kv_heads = model.kv_heads * hg.parts, group = hg.width;
  const std::vector<std::size_t>& query_sequence = plan.query_sequence;
  const std::uint64_t queries = plan.queries;
  const InputRows q_rows(q_in, queries, heads, dim, "q");
  check_out(out);
  if (queries == 0) return;  // a prefill of no queries: nothing to write
  const std::uint64_t pairs = queries * kv_heads;
  const std::vector<Item>& items = schedule.items;
  const std::vector<Segment>& segments = schedule.segments;
  // What the call keeps until it returns comes from one arena: decodes of a few tokens are
  // dominated by per-call costs, some thirty allocations among them. Its first buffer holds the
  // scaled queries, the items' softmax states and bookkeeping, up to 4 MiB (a large prefill's
  // further buffers grow from that, not from its whole size): every further buffer costs a call
  // microseconds (6 us at 4096 tokens, its pages new each time). Not for what the parallel tasks
  // allocate (the arena is not synchronized).
  std::pmr::monotonic_buffer_resource arena(std::min<std::uint64_t>(
      (queries * kv_heads * group * dim + schedule.state_at.back()) * sizeof(float) +
          items.size() * 64 + pairs * 64 + 16384,
      std::uint64_t{4} << 20));
  std::pmr::vector<PagedStore::LayerView> views(&arena);
  views.reserve(plan.sequences.size());
  for (const SeqId id : plan.sequences) views.push_back(store->view(id, layer));

  // Queries in float, pre-scaled for a base-2 softmax, [query][kernel head][group][dim].
  const float scale = (p.scale > 0.0f ? p.scale : 1.0f / std::sqrt(static_cast<float>(dim))) *
                      std::numbers::log2e_v<float>;
  // Not zeroed first: every element is written.
  auto* const q =
      static_cast<float*>(arena.allocate(queries * kv_heads * group * dim * sizeof(float), 64));
  {
    RowBuffer buffer(dim);
    for (std::uint64_t i = 0; i < queries; ++i)
      for (std::uint32_t h = 0; h < kv_heads; ++h)
        for (std::uint32_t g = 0; g < group; ++g)
          scale_into(q_rows.row(i, hg.query_head(h, g), buffer.data()), scale,
                     q + ((i * kv_heads + h) * group + g) * dim, dim);
  }
  const std::uint32_t max_width = schedule.max_width;
  const std::uint64_t work = schedule.work;

  // How K and V reach the kernels: BlockAttention reads fp16, bf16, fp8, int8 and int4 (groups
  // of 32, 64 or 128) rows in place where it can; everything else is decoded into float32 rows
  // first.
  // Accumulated scores need the exact logits of the float path (the weights must match the
  // reference), so they keep it.
  const SlotCodec& kc = store->codec(false);
  const SlotCodec& vc = store->codec(true);
  // The row kind in which a codec's rows can be read in place.
  const auto stored_kind = [](const SlotCodec& codec) {
    switch (codec.spec().kind) {
      case FormatKind::fp16:
        return RowFormat::float16;
      case FormatKind::bf16:
        return RowFormat::bfloat16;
      case FormatKind::fp8_e4m3:
        return RowFormat::fp8;
      case FormatKind::int8_per_token:
        return RowFormat::int8;
      case FormatKind::int4_group:
        return int4_rows(codec.spec().group);
      default:
        return RowFormat::float32;
    }
  };
  // Kernels per tile width (1, 2, 4, ...: index log2 of it).
  std::pmr::vector<BlockAttention> attend(&arena);
  for (std::uint32_t width = 1; width <= max_width; width *= 2)
    attend.emplace_back(group * width, dim,
                        p.accumulate_scores ? RowFormat::float32 : stored_kind(kc),
                        stored_kind(vc));
  std::pmr::vector<QuantizedQuery> q8(&arena);  // per (query, KV head), for int8 and int4 keys
  if (integer_rows(attend[0].keys())) {
    q8.reserve(pairs);
    for (std::uint64_t pair = 0; pair < pairs; ++pair)
      q8.push_back(attend[0].quantize(q + pair * group * dim, &arena));
  }

  // In pages, from the smaller of the two tiles and the farther of the two distances (K and V
  // may differ in format).
  const std::size_t small_tile = std::min(kc.layout().tile_bytes, vc.layout().tile_bytes);
  const std::size_t distance =
      std::max(prefetch_bytes(stored_kind(kc)), prefetch_bytes(stored_kind(vc)));
  const std::uint64_t ahead_pages =
      std::max<std::size_t>(2, (distance + small_tile - 1) / small_tile);
  // Walks the key blocks of an item (at most one page each): rows read in place are passed as
  // they are stored (with their next tile to prefetch), the others decoded into k and v; values
  // only when asked for.
  const auto for_each_block = [&](const Item& item, float* k, float* v, RowFormat keys,
                                  RowFormat values, bool with_values, auto&& body) {
    const std::size_t seq = query_sequence[item.query];
    const auto& view = views[seq];
    // This head's K and V tiles: a page's at base + page x bytes (the store's members are read
    // once, not at every page past the opaque kernel calls).
    const std::uint32_t kv_head = item.kv_head / hg.parts;
    const std::byte* const tiles[2] = {store->head_tiles(layer, kv_head, false),
                                       store->head_tiles(layer, kv_head, true)};
    const std::size_t tile_bytes[2] = {kc.layout().tile_bytes, vc.layout().tile_bytes};
    for (std::size_t i = item.first; i < item.end; ++i) {
      const Segment& s = segments[i];
      // Page by page, the index counted rather than divided for (a 64-bit division per page
      // showed in the profile).
      for (std::uint64_t b = s.begin, index = s.begin / page; b < s.end; ++index) {
        const std::uint64_t e = std::min(s.end, (index + 1) * page);
        const PageId p = view.pages[index];
        const auto n = static_cast<std::uint32_t>(e - b);
        // The tiles `ahead_pages` ahead start arriving now (the nearer ones are on their way).
        const std::uint64_t ahead_index = index + ahead_pages;
        RowBlock blocks[2];
        for (const bool value : {false, true}) {
          if (value && !with_values) continue;
          const SlotCodec& codec = value ? vc : kc;
          const RowFormat kind = value ? values : keys;
          const std::byte* tile = tiles[value] + std::size_t{p} * tile_bytes[value];
          const std::byte* ahead =
              ahead_index * page < s.end
                  ? tiles[value] + std::size_t{view.pages[ahead_index]} * tile_bytes[value]
                  : nullptr;
          const auto first = static_cast<std::uint32_t>(b - index * page);
          if (kind != RowFormat::float32) {
            blocks[value] = {kind, tile + slot_code_offset(codec.layout(), first),
                             tile + slot_meta_offset(codec.spec(), codec.layout(), dim, first),
                             ahead, tile_bytes[value]};
            continue;
          }
          float* rows = value ? v : k;
          blocks[value] = {RowFormat::float32, rows};
          // Slots of a token group still being filled wait in the residual, not in the page.
          const std::uint64_t complete =
              codec.spec().groups_tokens() ? view.written / codec.spec().group * codec.spec().group
                                           : view.written;
          const std::uint64_t split = std::clamp(complete, b, e);
          if (split > b)
            codec.decode_rows(tile, first, static_cast<std::uint32_t>(split - b), rows, ahead,
                              tile_bytes[value]);
          for (std::uint64_t slot = split; slot < e; ++slot)
            store->decode_row(plan.sequences[seq], layer, kv_head, value, slot,
                              rows + (slot - b) * dim);
        }
        body(blocks[0], blocks[1], b, n);
        b = e;
      }
    }
  };

  // body(item index, k, v, logits, row) for every item, in parallel (on the calling thread alone
  // below kParallelWork), with buffers per task for the rows decoded to float32 and the logits
  // of a block (for the widest tile), where the float path needs them, and for an output row.
  const bool float_rows =
      p.accumulate_scores || std::any_of(attend.begin(), attend.end(), [](const auto& a) {
        return a.keys() == RowFormat::float32 || a.values() == RowFormat::float32;
      });
  const auto for_each_item = [&](auto&& body) {
    const auto run_range = [&](const tbb::blocked_range<std::size_t>& range) {
      std::vector<float> k(float_rows ? std::size_t{page} * dim : 0), v(k.size()),
          logits(float_rows ? std::size_t{group} * max_width * page : 0), row(dim);
      for (std::size_t it = range.begin(); it != range.end(); ++it)
        body(it, k.data(), v.data(), logits.data(), row.data());
    };
    const tbb::blocked_range<std::size_t> all(0, items.size());
    if (work < kParallelWork)
      run_range(all);
    else
      tbb::parallel_for(all, run_range);
  };

  // Each item's state is laid out by its task, just before its kernels use it, in floats taken
  // here (zeroed up front instead, 32 states of a decode of 4096 tokens on two threads took
  // 2 us, their lines having left the caches since the last call).
  const std::vector<std::size_t>& state_at = schedule.state_at;
  auto* const state_memory =
      static_cast<float*>(arena.allocate(state_at.back() * sizeof(float), 64));
  std::pmr::vector<std::optional<SoftmaxState>> partial(items.size(), &arena);

  // The parts of each (query, KV head) (see WorkSchedule); `remaining` counts those still to run.
  const auto pair_of = [&](std::size_t it, std::uint32_t j) {
    return schedule.pair_of(it, j, kv_heads);
  };
  const std::vector<std::size_t>& part_begin = schedule.part_begin;
  const std::vector<std::size_t>& part_items = schedule.part_items;
  std::pmr::vector<std::atomic<std::uint32_t>> remaining(pairs, &arena);
  for (std::uint64_t pair = 0; pair < pairs; ++pair)
    remaining[pair].store(static_cast<std::uint32_t>(part_begin[pair + 1] - part_begin[pair]),
                          std::memory_order_relaxed);
  // A pair's final state: its first part when that is one query's own (its other parts merged
  // in), else a state of its own (a tile's part holds other queries' heads too, and a query that
  // sees no keys has no parts: its output is zeros).
  std::pmr::vector<SoftmaxState*> finals(pairs, nullptr, &arena);
  std::pmr::vector<std::optional<SoftmaxState>> own(pairs, &arena);
  std::pmr::vector<float> weight_sums(pairs * group, &arena);  // [pair][group]
  // Run by the task that completes a pair's last part, while the parts are still in cache:
  // merged at the end of the call instead, a decode of 4096 tokens on two threads spent 4-5 us
  // on its 32 parts, every read a cache miss. A state of its own comes from operator new, not
  // the arena (tasks run concurrently).
  const auto finish = [&](std::uint64_t pair, float* row) {
    const std::size_t* parts = part_items.data() + part_begin[pair];
    const std::size_t count = part_begin[pair + 1] - part_begin[pair];
    const std::uint64_t query = pair / kv_heads;
    const auto head_of = [&](std::size_t it) {  // the pair's first head in the part's state
      return static_cast<std::uint32_t>(query - items[it].query) * group;
    };
    SoftmaxState* state;
    std::size_t first = 0;
    if (count > 0 && items[parts[0]].width == 1) {
      state = &*partial[parts[0]];
      first = 1;
    } else {
      state = &own[pair].emplace(group, dim);
    }
    for (std::size_t i = first; i < count; ++i)
      state->merge(*partial[parts[i]], dim, head_of(parts[i]));
    finals[pair] = state;
    const auto kernel_head = static_cast<std::uint32_t>(pair % kv_heads);
    for (std::uint32_t g = 0; g < hg.count(kernel_head % hg.parts); ++g) {
      const float sum = weight_sums[pair * group + g] = state->weight_sum(g);
      scale_into(state->acc.data() + std::size_t{g} * dim, sum > 0.0f ? 1.0f / sum : 0.0f, row,
                 dim);
      store_row(out, query * heads + hg.query_head(kernel_head, g), row, dim);
    }
  };

  {
    std::pmr::vector<float> row(dim, &arena);
    for (std::uint64_t pair = 0; pair < pairs; ++pair)
      if (part_begin[pair + 1] == part_begin[pair]) finish(pair, row.data());
  }
  for_each_item([&](std::size_t it, float* k, float* v, float* logits, float* row) {
    const Item& item = items[it];
    SoftmaxState& state = partial[it].emplace(group * item.width, dim, state_memory + state_at[it]);
    const BlockAttention& kernels = attend[std::countr_zero(item.width)];
    const std::size_t pair = item.query * kv_heads + item.kv_head;
    const float* qg = q + pair * group * dim;
    const QuantizedQuery* qq = q8.empty() ? nullptr : &q8[pair];
    // A tile's query heads for this KV head, one query's after another.
    std::vector<float> tile_q;
    std::optional<QuantizedQuery> tile_q8;
    if (item.width > 1) {
      for (std::uint32_t j = 0; j < item.width; ++j) {
        const float* from = q + ((item.query + j) * kv_heads + item.kv_head) * group * dim;
        tile_q.insert(tile_q.end(), from, from + std::size_t{group} * dim);
      }
      qg = tile_q.data();
      if (integer_rows(kernels.keys())) qq = &tile_q8.emplace(kernels.quantize(qg));
    }
    PendingValues pending;
    if (kernels.keys() != RowFormat::float32 && kernels.values() != RowFormat::float32) {
      // Both sides read in place: the kernels walk the pages themselves.
      const auto& view = views[query_sequence[item.query]];
      BlockAttention::PageRun run{store->head_tiles(layer, item.kv_head / hg.parts, false),
                                  store->head_tiles(layer, item.kv_head / hg.parts, true),
                                  kc.layout().tile_bytes,
                                  vc.layout().tile_bytes,
                                  kc.layout().code_bytes,
                                  vc.layout().code_bytes,
                                  view.pages,
                                  page,
                                  0,
                                  0,
                                  ahead_pages};
      for (std::size_t i = item.first; i < item.end; ++i) {
        run.begin = segments[i].begin;
        run.end = segments[i].end;
        kernels(qg, qq, run, state, pending, logits);
      }
    } else {
      for_each_block(
          item, k, v, kernels.keys(), kernels.values(), true,
          [&](const RowBlock& keys, const RowBlock& values, std::uint64_t, std::uint32_t n) {
            kernels(qg, qq, keys, values, n, state, pending, logits);
          });
    }
    kernels.flush(pending);
    for (std::uint32_t j = 0; j < item.width; ++j)
      if (remaining[pair_of(it, j)].fetch_sub(1, std::memory_order_acq_rel) == 1)
        finish(pair_of(it, j), row);
  });

  if (!p.accumulate_scores) return;
  // Each visible key's final softmax weight, summed over the group's heads, added to its slot.
  for_each_item([&](std::size_t it, float* k, float* v, float* logits, float*) {
    const Item& item = items[it];
    const std::size_t pair = item.query * kv_heads + item.kv_head;
    const SoftmaxState& final_state = *finals[pair];
    const float* qg = q + pair * group * dim;
    const std::uint32_t real_heads = hg.count(item.kv_head % hg.parts);  // not the padding
    for_each_block(
        item, k, v, RowFormat::float32, RowFormat::float32, false,
        [&](const RowBlock&, const RowBlock&, std::uint64_t first, std::uint32_t n) {
          block_logits(qg, group, dim, k, n, logits);
          float* scores = views[query_sequence[item.query]].scores;
          for (std::uint32_t j = 0; j < n; ++j) {
            float weight = 0.0f;
            for (std::uint32_t g = 0; g < real_heads; ++g)
              weight += std::exp2(logits[std::size_t{g} * n + j] - final_state.m[g]) /
                        weight_sums[pair * group + g];
            std::atomic_ref<float>(scores[first + j]).fetch_add(weight, std::memory_order_relaxed);
          }
        });
  });
}

}  // namespace

void CpuAttention::decode(CacheStore& base, const AttentionRequest& request) {
  attend(base, request, false);
}
void CpuAttention::prefill(CacheStore& base, const AttentionRequest& request) {
  attend(base, request, true);
}

void CpuAttention::attend(CacheStore& base, const AttentionRequest& request, bool prefill) {
  PagedStore& store = cpu_store(base);
  const auto lock = store.lock_shared();
  const CpuPlan plan = make_plan(store, paging::plan_attention(store.book(), request, prefill),
                                 prefill, request.accumulate_scores, request.scale);
  run_layer(store, plan, request.layer, *request.q, *request.out);
}

std::unique_ptr<StepPlan> CpuAttention::plan(CacheStore& base, const StepRequest& request) {
  PagedStore& store = cpu_store(base);
  const auto lock = store.lock_shared();
  return std::make_unique<CpuPlan>(make_plan(store, paging::plan_step(store.book(), request),
                                             !request.query_counts.empty(),
                                             request.accumulate_scores, request.scale));
}

void CpuAttention::run(CacheStore& base, const StepPlan& step, std::uint32_t layer,
                       const DLTensor& q, DLTensor& out) {
  PagedStore& store = cpu_store(base);
  const auto* plan = dynamic_cast<const CpuPlan*>(&step);
  if (plan == nullptr || plan->store != &store)
    throw Error(Code::invalid_argument, "run: the plan was made for another store or attention");
  const auto lock = store.lock_shared();
  paging::check_step_layer(store.book(), plan->slots, layer, q, out);
  run_layer(store, *plan, layer, q, out);
}

}  // namespace kvcache::cpu
