// Paged attention on the GPU over a DeviceStore: the core's attention plan (visible slot spans per
// query), work items of (query, KV head, up to 8 heads of its group, a run of visible slots) sized
// so that a long sequence is split across the device (flash-decoding), the attend/merge kernels,
// and per-slot scores when asked. Prefill runs the same kernels with one item per query token.
#pragma once

#include "kernels.hpp"
#include "kvcache/attention.hpp"

namespace kvcache::gpu {

class DeviceAttention final : public Attention {
 public:
  explicit DeviceAttention(int device);
  void decode(CacheStore& store, const AttentionRequest& request) override;
  void prefill(CacheStore& store, const AttentionRequest& request) override;

 private:
  void run(CacheStore& store, const AttentionRequest& request, bool prefill);

  std::uint32_t processors_ = 1;  // multiprocessors (CUs): how many items keep the device busy
  DeviceBuffer work_;             // plan, q, partial states, logits, outputs, scores
};

}  // namespace kvcache::gpu
