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
#include "input_rows.hpp"
#include "kvcache/formats.hpp"
#include "kvcache/numeric.hpp"
#include "kvcache/paging/attention_plan.hpp"
#include "paged_store.hpp"
#include "query_tiles.hpp"
#include "softmax_block.hpp"

namespace kvcache::cpu {
namespace {

using Segment = paging::SlotSpan;

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

// One unit of work: some key slots of `width` consecutive queries (a tile, see query_tiles.hpp)
// and one KV head. Its slots are segments [first, end) of the call's segment list (one list, not
// one per item: small calls are dominated by such allocations).
struct Item {
  std::size_t query;
  std::uint32_t width;
  std::uint32_t kv_head;
  std::size_t first, end;
};

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

void run(CacheStore& base, const AttentionRequest& r, bool prefill) {
  auto* store = dynamic_cast<PagedStore*>(&base);
  if (store == nullptr)
    throw Error(Code::unsupported, "cpu-tbb attention reads cpu-tbb stores only");
  const ModelShape& model = store->spec().model;
  const std::uint32_t heads = model.q_heads, kv_heads = model.kv_heads, dim = model.head_dim;
  const std::uint32_t group = heads / kv_heads, page = store->page_size();
  const auto lock = store->lock_shared();
  const paging::AttentionPlan plan = paging::plan_attention(store->book(), r, prefill);
  const std::vector<std::size_t>& query_sequence = plan.query_sequence;
  const std::uint64_t queries = plan.queries;
  const InputRows q_rows(*r.q, queries, heads, dim, "q");
  check_out(*r.out);
  if (queries == 0) return;  // a prefill of no queries: nothing to write
  const std::uint64_t pairs = queries * kv_heads;
  // Work: each tile's shared slots and each query's own, per KV head, split when there are fewer
  // than 16 items a thread: threads on cores of unequal speed (a shared host's, here often 1.4x
  // apart) then even out by taking items from each other, a small part of the call each.
  const std::uint64_t threads = static_cast<std::uint64_t>(tbb::this_task_arena::max_concurrency());
  const std::uint64_t splits = pairs >= 16 * threads ? 1 : (16 * threads + pairs - 1) / pairs;
  // What the call keeps until it returns comes from one arena: decodes of a few tokens are
  // dominated by per-call costs, some thirty allocations among them. Its first buffer holds the
  // scaled queries, a softmax state per item of a decode and the items' bookkeeping, up to 4 MiB
  // (a large prefill's further buffers grow from that, not from its whole size): every further
  // buffer costs a call microseconds (6 us at 4096 tokens, its pages new each time). Not for
  // what the parallel tasks allocate (the arena is not synchronized).
  std::pmr::monotonic_buffer_resource arena(std::min<std::uint64_t>(
      (queries * heads * dim + pairs * splits * SoftmaxState::floats(group, dim)) * sizeof(float) +
          pairs * splits * 128 + 16384,
      std::uint64_t{4} << 20));
  std::pmr::vector<PagedStore::LayerView> views(&arena);
  views.reserve(r.sequences.size());
  for (const SeqId id : r.sequences) views.push_back(store->view(id, r.layer));

  // Queries in float, pre-scaled for a base-2 softmax.
  const float scale = (r.scale > 0.0f ? r.scale : 1.0f / std::sqrt(static_cast<float>(dim))) *
                      std::numbers::log2e_v<float>;
  // Not zeroed first: every element is written.
  auto* const q = static_cast<float*>(arena.allocate(queries * heads * dim * sizeof(float), 64));
  {
    RowBuffer buffer(dim);
    for (std::uint64_t i = 0; i < queries; ++i)
      for (std::uint32_t h = 0; h < heads; ++h)
        scale_into(q_rows.row(i, h, buffer.data()), scale, q + (i * heads + h) * dim, dim);
  }

  // Prefill queries in tiles of up to kMaxGroup query heads per KV head (not when scores are
  // accumulated: that pass walks each query's keys).
  const std::uint32_t max_width =
      prefill && !r.accumulate_scores && group <= kMaxGroup / 2 ? kMaxGroup / group : 1;
  const QueryTiles tiled = tile_queries(plan, max_width);

  std::pmr::vector<Item> items(&arena);
  std::pmr::vector<Segment> segments(&arena);  // of all items
  items.reserve(pairs * splits);
  segments.reserve(pairs * splits);
  std::uint64_t work = 0;  // key slots x queries of all items, summed over the KV heads
  const auto add_items = [&](std::size_t query, std::uint32_t width, std::uint32_t h,
                             const std::vector<Segment>& slots) {
    std::uint64_t total = 0;
    for (const Segment& s : slots) total += s.end - s.begin;
    work += total * width;
    const std::uint64_t chunk = std::max<std::uint64_t>(512, (total + splits - 1) / splits);
    std::size_t first = segments.size();
    std::uint64_t taken = 0;
    for (const Segment& s : slots) {
      for (std::uint64_t b = s.begin; b < s.end;) {
        const std::uint64_t e = std::min(s.end, b + (chunk - taken));
        segments.push_back({b, e});
        taken += e - b;
        b = e;
        if (taken == chunk) {
          items.push_back({query, width, h, first, segments.size()});
          first = segments.size();
          taken = 0;
        }
      }
    }
    if (first != segments.size()) items.push_back({query, width, h, first, segments.size()});
  };
  // KV head by KV head: a thread's items (a contiguous range of them) mostly read one head's
  // pages, which a prefill's tiles read again and again, from its L2 when they fit there.
  for (std::uint32_t h = 0; h < kv_heads; ++h) {
    for (const QueryTile& tile : tiled.tiles) add_items(tile.first, tile.width, h, tile.shared);
    for (std::uint64_t i = 0; i < queries; ++i) add_items(i, 1, h, tiled.own[i]);
  }

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
                        r.accumulate_scores ? RowFormat::float32 : stored_kind(kc),
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
    const std::byte* const tiles[2] = {store->head_tiles(r.layer, item.kv_head, false),
                                       store->head_tiles(r.layer, item.kv_head, true)};
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
            store->decode_row(r.sequences[seq], r.layer, item.kv_head, value, slot,
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
      r.accumulate_scores || std::any_of(attend.begin(), attend.end(), [](const auto& a) {
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
  std::pmr::vector<std::size_t> state_at(items.size() + 1, 0, &arena);
  for (std::size_t it = 0; it < items.size(); ++it)
    state_at[it + 1] = state_at[it] + SoftmaxState::floats(group * items[it].width, dim);
  auto* const state_memory =
      static_cast<float*>(arena.allocate(state_at.back() * sizeof(float), 64));
  std::pmr::vector<std::optional<SoftmaxState>> partial(items.size(), &arena);

  // The parts of each (query, KV head): the items over it, in item order, at
  // part_items[part_begin[pair] .. part_begin[pair + 1]); `remaining` counts those still to run.
  const auto pair_of = [&](std::size_t it, std::uint32_t j) {
    return (items[it].query + j) * kv_heads + items[it].kv_head;
  };
  std::pmr::vector<std::size_t> part_begin(pairs + 1, 0, &arena);
  for (std::size_t it = 0; it < items.size(); ++it)
    for (std::uint32_t j = 0; j < items[it].width; ++j) ++part_begin[pair_of(it, j) + 1];
  for (std::uint64_t pair = 0; pair < pairs; ++pair) part_begin[pair + 1] += part_begin[pair];
  std::pmr::vector<std::size_t> part_items(part_begin[pairs], &arena);
  std::pmr::vector<std::atomic<std::uint32_t>> remaining(pairs, &arena);
  {
    std::pmr::vector<std::size_t> filled(part_begin.begin(), part_begin.end() - 1, &arena);
    for (std::size_t it = 0; it < items.size(); ++it)
      for (std::uint32_t j = 0; j < items[it].width; ++j) part_items[filled[pair_of(it, j)]++] = it;
  }
  for (std::uint64_t pair = 0; pair < pairs; ++pair)
    remaining[pair].store(static_cast<std::uint32_t>(part_begin[pair + 1] - part_begin[pair]),
                          std::memory_order_relaxed);
  // A pair's final state: its first part when that is one query's own (its other parts merged
  // in), else a state of its own (a tile's part holds other queries' heads too, and a query that
  // sees no keys has no parts: its output is zeros).
  std::pmr::vector<SoftmaxState*> finals(pairs, nullptr, &arena);
  std::pmr::vector<std::optional<SoftmaxState>> own(pairs, &arena);
  std::pmr::vector<float> weight_sums(queries * heads, &arena);  // [pair][group]
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
    for (std::uint32_t g = 0; g < group; ++g) {
      const float sum = weight_sums[pair * group + g] = state->weight_sum(g);
      scale_into(state->acc.data() + std::size_t{g} * dim, sum > 0.0f ? 1.0f / sum : 0.0f, row,
                 dim);
      const std::uint32_t head = static_cast<std::uint32_t>(pair % kv_heads) * group + g;
      store_row(*r.out, query * heads + head, row, dim);
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
      BlockAttention::PageRun run{store->head_tiles(r.layer, item.kv_head, false),
                                  store->head_tiles(r.layer, item.kv_head, true),
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

  if (!r.accumulate_scores) return;
  // Each visible key's final softmax weight, summed over the group's heads, added to its slot.
  for_each_item([&](std::size_t it, float* k, float* v, float* logits, float*) {
    const Item& item = items[it];
    const std::size_t pair = item.query * kv_heads + item.kv_head;
    const SoftmaxState& final_state = *finals[pair];
    const float* qg = q + pair * group * dim;
    for_each_block(
        item, k, v, RowFormat::float32, RowFormat::float32, false,
        [&](const RowBlock&, const RowBlock&, std::uint64_t first, std::uint32_t n) {
          block_logits(qg, group, dim, k, n, logits);
          float* scores = views[query_sequence[item.query]].scores;
          for (std::uint32_t j = 0; j < n; ++j) {
            float weight = 0.0f;
            for (std::uint32_t g = 0; g < group; ++g)
              weight += std::exp2(logits[std::size_t{g} * n + j] - final_state.m[g]) /
                        weight_sums[pair * group + g];
            std::atomic_ref<float>(scores[first + j]).fetch_add(weight, std::memory_order_relaxed);
          }
        });
  });
}

}  // namespace

void CpuAttention::decode(CacheStore& store, const AttentionRequest& request) {
  run(store, request, false);
}
void CpuAttention::prefill(CacheStore& store, const AttentionRequest& request) {
  run(store, request, true);
}

}  // namespace kvcache::cpu
