// Attention over cpu-tbb stores: work split over queries x KV heads, and along the keys
// (flash-decoding) when there are too few of those to keep every core busy; the query heads of
// a KV head go together so each K/V row is decoded once per group.
#pragma once

#include "kvcache/attention.hpp"

namespace kvcache::cpu {

class CpuAttention final : public Attention {
 public:
  void decode(CacheStore& store, const AttentionRequest& request) override;
  void prefill(CacheStore& store, const AttentionRequest& request) override;
  // A step: the slots and the work schedule once, every layer on them.
  std::unique_ptr<StepPlan> plan(CacheStore& store, const StepRequest& request) override;
  void run(CacheStore& store, const StepPlan& plan, std::uint32_t layer, const DLTensor& q,
           DLTensor& out) override;

 private:
  void attend(CacheStore& store, const AttentionRequest& request, bool prefill);
};

}  // namespace kvcache::cpu
