// What every layer of a step on cpu-tbb runs with, made once with the step's plan (FlashInfer's
// plan/run split): the kernels of each tile width, how far ahead tiles are asked for, whether
// some rows are decoded to float32 first, the query each rotation turns, the size of a layer's
// arena, and each sequence's pages and scores. A layer adds only what its queries make (layer_run).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "attention/head_groups.hpp"
#include "attention/work_schedule.hpp"
#include "kernels/block_attention.hpp"
#include "kvcache/paging/attention_plan.hpp"
#include "store/paged_store.hpp"

namespace kvcache::cpu {

struct StepKernels {
  // Under the store's lock, for the plan's sequences: valid while the plan is (their pages and
  // scores move only when they change shape, which makes the plan stale).
  StepKernels(PagedStore& store, const paging::AttentionPlan& slots, const HeadGroups& heads,
              const WorkSchedule& schedule, bool accumulate_scores);

  std::vector<BlockAttention> kernels;  // per tile width 1, 2, 4, ... (index log2 of it)
  std::uint64_t ahead_pages = 2;        // tiles asked for ahead of the rows being read
  bool float_rows = false;              // some kernels read rows decoded to float32
  // Per rotation (a query's, for one of its ranges): the query it turns; slots.queries where no
  // span uses it (its range held no slots), so it stays unturned and unread.
  std::vector<std::uint64_t> rotation_query;
  std::size_t arena_bytes = 0;                   // a layer's first buffer (layer_run.hpp)
  std::vector<PagedStore::SequencePages> pages;  // per sequence of the plan

  // That first buffer, made once a step: its layers run one after another and take turns with
  // it, so a layer allocates nothing before its arena overflows. A layer that finds it taken (a
  // caller running layers of one plan at once) gets a buffer of its own.
  class Buffer {
   public:
    explicit Buffer(const StepKernels& step);
    ~Buffer();
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    std::byte* data() const { return data_; }

   private:
    const StepKernels& step_;
    std::unique_ptr<std::byte[]> own_;  // when the step's was taken
    std::byte* data_ = nullptr;
  };

 private:
  std::unique_ptr<std::byte[]> buffer_;
  mutable std::atomic_flag buffer_taken_;
};

}  // namespace kvcache::cpu
