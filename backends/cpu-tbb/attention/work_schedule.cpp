#include "attention/work_schedule.hpp"

#include <algorithm>

#include "attention/query_tiles.hpp"
#include "kernels/block16.hpp"
#include "kernels/softmax_state.hpp"

namespace kvcache::cpu {

WorkSchedule schedule_work(const paging::AttentionPlan& plan, const ScheduleShape& shape) {
  const std::uint32_t kv_heads = shape.kv_heads, group = shape.group;
  const std::uint64_t pairs = plan.queries * kv_heads;
  WorkSchedule w;
  // Each tile's shared slots and each query's own, per KV head, split when there are fewer than
  // 16 items a thread: threads on cores of unequal speed (a shared host's, here often 1.4x apart)
  // then even out by taking items from each other, a small part of the call each.
  const std::uint64_t splits = pairs >= 16 * shape.threads ? 1
                                                           : (16 * shape.threads + pairs - 1) /
                                                                 std::max<std::uint64_t>(pairs, 1);
  // Prefill queries in tiles of up to kMaxGroup query heads per KV head.
  w.max_width = shape.tiles && !shape.invariant && group <= kMaxGroup / 2 ? kMaxGroup / group : 1;
  const QueryTiles tiled = tile_queries(plan, w.max_width);
  w.items.reserve(pairs * splits);
  w.segments.reserve(pairs * splits);
  const auto add_items = [&](std::size_t query, std::uint32_t width, std::uint32_t h,
                             const std::vector<Segment>& slots) {
    std::uint64_t total = 0;
    for (const Segment& s : slots) total += s.end - s.begin;
    w.work += total * width;
    const std::uint64_t chunk = shape.invariant
                                    ? kInvariantChunk
                                    : std::max<std::uint64_t>(512, (total + splits - 1) / splits);
    std::size_t first = w.segments.size();
    std::uint64_t taken = 0;
    const auto close = [&] {
      if (first != w.segments.size())
        w.items.push_back({query, width, h, first, w.segments.size()});
      first = w.segments.size();
      taken = 0;
    };
    // Spans of other rotations (the sinks' under positions within the cache) stay in the item:
    // its runner turns the query per segment, and no 4-token item costs a merge.
    for (const Segment& s : slots) {
      for (std::uint64_t b = s.begin; b < s.end;) {
        const std::uint64_t e = std::min(s.end, b + (chunk - taken));
        w.segments.push_back({b, e, s.rotation});
        taken += e - b;
        b = e;
        if (taken == chunk) close();
      }
    }
    close();
  };
  // KV head by KV head: a thread's items (a contiguous range of them) mostly read one head's
  // pages, which a prefill's tiles read again and again, from its L2 when they fit there.
  for (std::uint32_t h = 0; h < kv_heads; ++h) {
    for (const QueryTile& tile : tiled.tiles) add_items(tile.first, tile.width, h, tile.shared);
    for (std::uint64_t i = 0; i < plan.queries; ++i) add_items(i, 1, h, tiled.own[i]);
  }

  w.part_begin.assign(pairs + 1, 0);
  for (std::size_t it = 0; it < w.items.size(); ++it)
    for (std::uint32_t j = 0; j < w.items[it].width; ++j)
      ++w.part_begin[w.pair_of(it, j, kv_heads) + 1];
  for (std::uint64_t pair = 0; pair < pairs; ++pair) w.part_begin[pair + 1] += w.part_begin[pair];
  w.part_items.resize(w.part_begin[pairs]);
  std::vector<std::size_t> filled(w.part_begin.begin(), w.part_begin.end() - 1);
  for (std::size_t it = 0; it < w.items.size(); ++it)
    for (std::uint32_t j = 0; j < w.items[it].width; ++j)
      w.part_items[filled[w.pair_of(it, j, kv_heads)]++] = it;

  w.state_at.assign(w.items.size() + 1, 0);
  for (std::size_t it = 0; it < w.items.size(); ++it)
    w.state_at[it + 1] =
        w.state_at[it] + SoftmaxState::floats(group * w.items[it].width, shape.dim);
  return w;
}

}  // namespace kvcache::cpu
