// Attention over cpu-tbb stores: work split over queries x KV heads, and along the keys
// (flash-decoding) when there are too few of those to keep every core busy; the query heads of
// a KV head go together so each K/V row is decoded once per group.
#pragma once

#include "kvcache/attention.hpp"

namespace kvcache::cpu {

class CpuAttention final : public Attention {
 public:
  // Batch-invariant: a query's output depends only on the query and the keys it sees, bit for
  // bit, whether it comes alone, in a batch, from any number of threads or as a row of a prefill
  // (so a chunked prefill gives what decoding token by token gives). Its keys are split at fixed
  // counts of slots and never share a query tile: prefill reads keys once per query.
  explicit CpuAttention(bool batch_invariant = false) : batch_invariant_(batch_invariant) {}
  // A step: the slots and the work schedule once, every layer on them.
  std::unique_ptr<StepPlan> plan(CacheStore& store, const StepRequest& request) override;
  void run(CacheStore& store, const StepPlan& plan, std::uint32_t layer, const DLTensor& q,
           DLTensor& out) override;

 private:
  bool batch_invariant_;
};

}  // namespace kvcache::cpu
