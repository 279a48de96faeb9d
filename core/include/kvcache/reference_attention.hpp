// Reference attention: plain loops with float64 accumulation, the oracle every backend's
// attention kernels are compared with. It reads decoded K/V and visible ranges of logical
// positions, exactly what a mask says; it never builds a dense mask.
#pragma once

#include <cstdint>
#include <span>

#include "kvcache/export.hpp"
#include "kvcache/host_only.hpp"
#include "kvcache/rope.hpp"
#include "kvcache/types.hpp"

namespace kvcache::reference {

struct AttentionShape {
  std::uint32_t q_heads = 0;
  std::uint32_t kv_heads = 0;  // query head h reads KV head h / (q_heads / kv_heads)
  std::uint32_t head_dim = 0;
};

// One query token against one sequence's cache.
//   q:        [q_heads][head_dim]
//   keys:     [n][kv_heads][head_dim], values likewise, positions[n] ascending
//   visible:  ranges of positions the query may see (from its mask)
//   out:      [q_heads][head_dim]; zeros when no key is visible
//   weights:  optional [n]: each key's softmax weight summed over query heads is added
KVCACHE_API void attention(const AttentionShape& shape, std::span<const float> q,
                           std::span<const float> keys, std::span<const float> values,
                           std::span<const Position> positions,
                           std::span<const PositionRange> visible, float scale,
                           std::span<float> out, std::span<float> weights = {});

// Attention at positions within the cache, as StreamingLLM defines them, for a RoPE model whose
// keys are stored rotated at their own positions and whose query is rotated at q_position: the
// visible keys are numbered by their rank among themselves (the cache holds those, in order), each
// key is turned from its position to its rank and the query to the number of visible keys before
// it, then attention is dense over them. The kernels turn the query per range instead and must
// agree (docs/streaming.md). Arguments as attention()'s.
KVCACHE_API void attention_at_cache_positions(
    const AttentionShape& shape, const Rope& rope, std::span<const float> q, Position q_position,
    std::span<const float> keys, std::span<const float> values, std::span<const Position> positions,
    std::span<const PositionRange> visible, float scale, std::span<float> out);

}  // namespace kvcache::reference
