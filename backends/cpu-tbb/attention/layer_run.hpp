// One layer of cpu-tbb attention on a step's plan: what every stage of it reads. The step's own
// part (step_kernels.hpp: the kernels of each tile width, the sequences' pages, how far ahead the
// tiles are asked for) and the layer's: the queries scaled for a base-2 softmax (and quantized for
// integer keys) in the arena the layer's buffers come from. Stages: the items run (item_runner),
// their partial states merge (pair_merge), the score pass (score_pass).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "attention/head_groups.hpp"
#include "attention/step_kernels.hpp"
#include "attention/work_schedule.hpp"
#include "kernels/block_attention.hpp"
#include "kvcache/paging/attention_plan.hpp"
#include "store/input_rows.hpp"
#include "store/paged_store.hpp"

namespace kvcache::cpu {

// Buffers of one task: rows decoded to float32 (k, v), a block's logits (for the widest tile)
// where the float path needs them, and an output row.
struct TaskBuffers {
  float* k;
  float* v;
  float* logits;
  float* row;
};

class LayerRun {
 public:
  // q: [queries, q_heads, head_dim] (checked by the plan); scale 0: 1 / sqrt(head_dim).
  // heads: the kernel heads `schedule` and `step` were made for.
  LayerRun(PagedStore& store, const paging::AttentionPlan& slots, const HeadGroups& heads,
           const WorkSchedule& schedule, const StepKernels& step, std::uint32_t layer,
           const InputRows& q, float scale);
  LayerRun(const LayerRun&) = delete;
  LayerRun& operator=(const LayerRun&) = delete;

  PagedStore& store;
  const paging::AttentionPlan& slots;
  const WorkSchedule& schedule;
  const StepKernels& step;
  const std::uint32_t layer;
  const HeadGroups hg;
  // `kv_heads` kernel heads of `group` query heads each; kernel head h reads the K and V of the
  // model's KV head h / hg.parts.
  const std::uint32_t kv_heads, group, dim, page;
  const std::uint64_t pairs;  // queries x kernel heads

 private:
  StepKernels::Buffer buffer_;  // the arena's first buffer

 public:
  std::pmr::monotonic_buffer_resource arena;
  const SlotCodec& kc;
  const SlotCodec& vc;

  // A pair's query heads, [group][dim], turned by `rotation` (+ 1; 0: as given), and their
  // quantized form (int8 and int4 keys).
  const float* query(std::size_t pair, std::uint32_t rotation = 0) const {
    return rotation == 0 ? q_ + pair * group * dim
                         : turned_ + ((rotation - 1) * kv_heads + pair % kv_heads) * group * dim;
  }
  const QuantizedQuery* quantized(std::size_t pair, std::uint32_t rotation = 0) const {
    if (q8_.empty()) return nullptr;
    return rotation == 0 ? &q8_[pair] : &q8_[pairs + (rotation - 1) * kv_heads + pair % kv_heads];
  }
  // The K or V tiles of a kernel head's KV head: a page's at base + page x the tile's bytes.
  const std::byte* tiles(std::uint32_t kernel_head, bool value) const {
    return store.head_tiles(layer, kernel_head / hg.parts, value);
  }

  // body(item, buffers) for every item of the schedule, in parallel (on the calling thread alone
  // below a small amount of work), with buffers per task.
  template <class Body>
  void for_each_item(Body&& body) const;

 private:
  // Fills turned_: each rotation's query, turned, then scaled by `factor` as q_ is.
  void turn_queries(const InputRows& q_rows, float factor);

  float* q_ = nullptr;  // [query][kernel head][group][dim]
  // [rotation][kernel head][group][dim]: the query of each rotation the spans use, turned.
  float* turned_ = nullptr;
  std::size_t rotations_ = 0;
  std::pmr::vector<QuantizedQuery> q8_;  // per pair, then per rotation and kernel head
};

// Work (key slots times queries, over the KV heads) below which a call runs on the calling
// thread alone: below it, handing work to a second thread costs more than it saves.
inline constexpr std::uint64_t kParallelWork = 1024;

template <class Body>
void LayerRun::for_each_item(Body&& body) const {
  const auto run_range = [&](const tbb::blocked_range<std::size_t>& range) {
    std::vector<float> k(step.float_rows ? std::size_t{page} * dim : 0), v(k.size()),
        logits(step.float_rows ? std::size_t{group} * schedule.max_width * page : 0), row(dim);
    TaskBuffers buffers{k.data(), v.data(), logits.data(), row.data()};
    for (std::size_t it = range.begin(); it != range.end(); ++it) body(it, buffers);
  };
  const tbb::blocked_range<std::size_t> all(0, schedule.items.size());
  if (schedule.work < kParallelWork)
    run_range(all);
  else
    tbb::parallel_for(all, run_range);
}

}  // namespace kvcache::cpu
