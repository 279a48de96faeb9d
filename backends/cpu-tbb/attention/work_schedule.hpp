// The first stage of cpu-tbb attention, done once per step: the work items every layer runs and
// how their partial softmax states merge (FlashInfer's scheduler). An item is some key slots of
// `width` consecutive queries (a tile, see query_tiles.hpp) and one KV head; a (query, KV head)
// pair whose keys are split over several items merges their states when its last part is done.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvcache/paging/attention_plan.hpp"

namespace kvcache::cpu {

using Segment = paging::SlotSpan;

// Its slots are segments [first, end) of the schedule's segment list (one list, not one per
// item: small calls are dominated by such allocations).
struct Item {
  std::size_t query;
  std::uint32_t width;
  std::uint32_t kv_head;
  std::size_t first, end;  // each segment says how its query is turned (tiles: never)
};

struct WorkSchedule {
  std::uint32_t max_width = 1;  // the widest query tile
  std::vector<Item> items;      // KV head by KV head
  std::vector<Segment> segments;
  std::uint64_t work = 0;  // key slots x queries of all items, summed over the KV heads
  // The parts of each pair (query x kv_heads + KV head): the items over it, in item order, at
  // part_items[part_begin[pair] .. part_begin[pair + 1]).
  std::vector<std::size_t> part_begin;
  std::vector<std::size_t> part_items;
  // Where each item's softmax state starts in the floats of a run, and their total at the end.
  std::vector<std::size_t> state_at;

  std::size_t pair_of(std::size_t item, std::uint32_t j, std::uint32_t kv_heads) const {
    return (items[item].query + j) * kv_heads + items[item].kv_head;
  }
};

struct ScheduleShape {
  std::uint32_t kv_heads, group, dim;
  std::uint64_t threads;
  bool tiles;  // prefill queries may go in tiles (not when scores are accumulated)
  // Each query alone, its slots split every kInvariantChunk: the schedule, and so the order of
  // every sum, then depends on the query's own slots only (CpuAttention's batch_invariant).
  bool invariant = false;
};

inline constexpr std::uint64_t kInvariantChunk = 1024;

WorkSchedule schedule_work(const paging::AttentionPlan& plan, const ScheduleShape& shape);

}  // namespace kvcache::cpu
