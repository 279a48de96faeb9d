// The staged kernel's queries (staged_attention.cuh): an item's query heads scaled into shared
// memory, where every lane reads them at once, and for integer keys also rounded to int8.
#pragma once

#include <cstdint>

#include "stage.cuh"

namespace kvcache::gpu::staged {

template <std::uint32_t kHeads, std::uint32_t kKind, std::uint32_t kDim>
struct Queries {
  static constexpr bool integer_keys = kKind == kInt8PerToken || kKind == kInt4Group;
  alignas(16) float scaled[kHeads][kDim];  // the item's query heads, scaled
  // Integer keys: the queries rounded to int8 per kQueryBlock elements (int4: each 8 as their
  // even, then their odd elements, the order of a word's nibbles split into bytes), their steps,
  // and (int4) the rounded queries' sums over 32 elements.
  alignas(16) std::int8_t rounded[kHeads][kDim];
  float steps[kHeads][kDim / kQueryBlock];
  float sums[kHeads][kDim / 32];
};

// The item's query heads (turned by its rotation, if any), scaled; zeros past its heads.
template <std::uint32_t kHeads, std::uint32_t kKind, std::uint32_t kDim>
KVC_INLINE void scale_queries(const AttentionArgs& a, const WorkItem& it, std::uint32_t first_head,
                              Queries<kHeads, kKind, kDim>& q) {
  for (std::uint32_t i = threadIdx.x; i < kHeads * kDim; i += blockDim.x) {
    const std::uint32_t g = i / kDim, d = i % kDim;
    float x = 0.0f;
    if (g < it.heads)
      x = it.rotation == 0
              ? load_input(a.q, a.q_dtype,
                           (std::uint64_t{it.query} * a.q_heads + first_head + g) * kDim + d)
              : a.turned[(std::uint64_t{it.rotation - 1} * a.q_heads + first_head + g) * kDim + d];
    q.scaled[g][d] = x * a.scale;
  }
}

// Integer keys: the scaled queries rounded, a warp per block of a head (lane j rounds elements
// kPerLane * j and the next ones).
template <std::uint32_t kHeads, std::uint32_t kKind, std::uint32_t kDim>
KVC_INLINE void round_queries(std::uint32_t warp, std::uint32_t lane,
                              Queries<kHeads, kKind, kDim>& q) {
  constexpr std::uint32_t kBlocks = kDim / kQueryBlock, kPerLane = kQueryBlock / kWarp;
  constexpr std::uint32_t kGranuleLanes = 32 / kPerLane;  // int4: the lanes of 32 elements
  for (std::uint32_t p = warp; p < kHeads * kBlocks; p += kWarps) {
    const std::uint32_t g = p / kBlocks, first = p % kBlocks * kQueryBlock + kPerLane * lane;
    float x[kPerLane];
    for (std::uint32_t i = 0; i < kPerLane; ++i) x[i] = q.scaled[g][first + i];
    float mine = x[0] < 0 ? -x[0] : x[0];
    for (std::uint32_t i = 1; i < kPerLane; ++i) mine = max_of(mine, x[i] < 0 ? -x[i] : x[i]);
    const float top = warp_max(mine);
    const bool tiny = top < 1.17549435e-38f;  // below the smallest normal float: no steps
    if (lane == 0) q.steps[g][p % kBlocks] = tiny ? 0.0f : top / 127.0f;
    float rounded = 0.0f;
    for (std::uint32_t i = 0; i < kPerLane; ++i) {
      const std::uint32_t e = first + i, k = e % 8;
      const std::uint32_t at = kKind == kInt4Group ? e - k + (k % 2) * 4 + k / 2 : e;
      const std::int32_t code = tiny ? 0 : round_to_int(x[i] * (127.0f / top));
      q.rounded[g][at] = static_cast<std::int8_t>(code);
      rounded += static_cast<float>(code);
    }
    if constexpr (kKind == kInt4Group) {
      // Each kGranuleLanes lanes' elements are one granule: the sum of its rounded q.
      for (std::uint32_t mask = kGranuleLanes / 2; mask > 0; mask /= 2)
        rounded += KVC_SHFL_XOR(rounded, mask);
      if (lane % kGranuleLanes == 0) q.sums[g][first / 32] = rounded * (tiny ? 0.0f : top / 127.0f);
    }
  }
}

}  // namespace kvcache::gpu::staged
