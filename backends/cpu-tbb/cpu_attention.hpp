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
};

}  // namespace kvcache::cpu
