// Attention over a CacheStore (see DESIGN.md "Attention"): decode (one query token per
// sequence) and prefill (many per sequence), MHA/GQA/MQA, any mask through the visible ranges
// it answered, every stored format read in place.
#pragma once

#include <cstdint>
#include <span>

#include <dlpack/dlpack.h>

#include "kvcache/cache_store.hpp"
#include "kvcache/types.hpp"

namespace kvcache {

// What a mask answered for each query: at most max_ranges ascending ranges of logical positions
// per query, at ranges[i * max_ranges], counts[i] of them.
struct VisibleRanges {
  std::span<const PositionRange> ranges;
  std::span<const std::uint32_t> counts;
  std::uint32_t max_ranges = 1;
};

struct AttentionRequest {
  std::uint32_t layer = 0;
  std::span<const SeqId> sequences;
  // Queries per sequence, the last written slots of `layer` in order. Empty for decode: one each.
  std::span<const std::uint32_t> query_counts;
  const DLTensor* q = nullptr;  // [queries, q_heads, head_dim], float32/float16/bfloat16, host
  DLTensor* out = nullptr;      // [queries, q_heads, head_dim], float32/float16/bfloat16, host
  VisibleRanges visible;        // one entry per query
  float scale = 0.0f;           // 0: 1 / sqrt(head_dim)
  // Adds each key's softmax weight, summed over query heads, to the store's per-slot scores
  // (what score-based eviction such as H2O reads).
  bool accumulate_scores = false;
};

class Attention {
 public:
  virtual ~Attention() = default;
  // One query token per sequence (query_counts empty).
  virtual void decode(CacheStore& store, const AttentionRequest& request) = 0;
  // query_counts[i] query tokens for sequences[i], e.g. a prompt chunk just appended.
  virtual void prefill(CacheStore& store, const AttentionRequest& request) = 0;
};

}  // namespace kvcache
