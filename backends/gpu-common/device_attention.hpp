// Paged attention on the GPU over a DeviceStore: the core's attention plan (visible slot spans per
// query), work items of (query, KV head, up to 8 heads of its group, a run of visible slots) sized
// so that a long sequence is split across the device (flash-decoding), the attention kernels,
// and per-slot scores when asked. Prefill runs the same kernels with one item per query token. A
// step uploads its plan once; each layer uploads only its host queries (and the rows of token
// groups still being filled) and is one launch that attends and merges the splits.
#pragma once

#include "kernels.hpp"
#include "kvcache/attention.hpp"
#include "kvcache/paging/attention_plan.hpp"

namespace kvcache::gpu {

class DeviceStore;
struct DevicePlan;

class DeviceAttention final : public Attention {
 public:
  explicit DeviceAttention(int device);
  std::unique_ptr<StepPlan> plan(CacheStore& store, const StepRequest& request) override;
  void run(CacheStore& store, const StepPlan& plan, std::uint32_t layer, const DLTensor& q,
           DLTensor& out) override;
  void finish(CacheStore& store, const StepPlan& plan, void* event) override;

 private:
  std::unique_ptr<DevicePlan> make_plan(DeviceStore& store, paging::AttentionPlan slots,
                                        const StepRequest& request) const;
  void run_layer(DeviceStore& store, const DevicePlan& plan, std::uint32_t layer, const DLTensor& q,
                 DLTensor& out);

  std::uint32_t processors_ = 1;  // multiprocessors (CUs): how many items keep the device busy
};

}  // namespace kvcache::gpu
