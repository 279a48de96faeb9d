// The staged kernel's online softmax (staged_attention.cuh): a lane's running state of every
// query head, and the step a tile of logits takes it. Only the tile's maximum crosses lanes (one
// reduction per head per tile); l is summed over the lanes at the end.
#pragma once

#include <cstdint>

#include "stage.cuh"

namespace kvcache::gpu::staged {

// Per query head: the running maximum m (the same in every lane), the lane's sum of weights l,
// its kLaneDims output dimensions, and (int4 values) their common offset, the weights times the
// groups' minimum.
template <std::uint32_t kHeads, std::uint32_t kLaneDims>
struct SoftmaxState {
  float m[kHeads], l[kHeads], acc[kHeads][kLaneDims], bias[kHeads];

  KVC_INLINE void clear() {
    KVC_UNROLL
    for (std::uint32_t g = 0; g < kHeads; ++g) {
      m[g] = -INFINITY;
      l[g] = bias[g] = 0.0f;
      KVC_UNROLL
      for (std::uint32_t d = 0; d < kLaneDims; ++d) acc[g][d] = 0.0f;
    }
  }
};

// Takes the state past a tile whose lane's row has `logit` (none when !seen): the maximum moves
// to the tile's, what was summed shrinks by as much, and the row's weights wait in `weights` for
// the tile's values.
template <std::uint32_t kHeads, std::uint32_t kLaneDims>
KVC_INLINE void softmax_step(SoftmaxState<kHeads, kLaneDims>& s, float (&logit)[kHeads], bool seen,
                             float (&weights)[kHeads]) {
  KVC_UNROLL
  for (std::uint32_t g = 0; g < kHeads; ++g) {
    if (!seen) logit[g] = -INFINITY;
    const float tile_top = warp_max(logit[g]);
    const float top = s.m[g] > tile_top ? s.m[g] : tile_top;
    const float shrink = weight_of(s.m[g], top);
    const float p = weight_of(logit[g], top);
    s.l[g] = s.l[g] * shrink + p;
    s.bias[g] *= shrink;
    KVC_UNROLL
    for (std::uint32_t d = 0; d < kLaneDims; ++d) s.acc[g][d] *= shrink;
    s.m[g] = top;
    weights[g] = p;
  }
}

}  // namespace kvcache::gpu::staged
