// The staged kernel's end (staged_attention.cuh): the block's warps combine their softmax states
// through the staging memory, now idle, and merge_states.cuh writes the item's output or its
// partial state.
#pragma once

#include <cstdint>

#include "../merge_states.cuh"
#include "softmax.cuh"
#include "stage.cuh"

namespace kvcache::gpu::staged {

// Every thread of the block calls it, once its copies have all arrived.
template <std::uint32_t kHeads, std::uint32_t kDim, std::uint32_t kLaneDims>
KVC_INLINE void combine_warps(SoftmaxState<kHeads, kLaneDims>& s, const AttentionArgs& a,
                              const WorkItem& it, std::uint32_t warp, std::uint32_t lane,
                              std::uint8_t* shared) {
  KVC_UNROLL
  for (std::uint32_t g = 0; g < kHeads; ++g) s.l[g] = warp_sum(s.l[g]);
  __syncthreads();
  float* const merge_m = reinterpret_cast<float*>(shared);
  float* const merge_l = merge_m + kWarps * kHeads;
  float* const merge_acc = merge_l + kWarps * kHeads;
  KVC_UNROLL
  for (std::uint32_t g = 0; g < kHeads; ++g) {
    if (lane == 0) {
      merge_m[warp * kHeads + g] = s.m[g];
      merge_l[warp * kHeads + g] = s.l[g];
    }
    KVC_UNROLL
    for (std::uint32_t d = 0; d < kLaneDims; ++d)
      merge_acc[(warp * kHeads + g) * kDim + lane * kLaneDims + d] = s.acc[g][d] + s.bias[g];
  }
  __syncthreads();
  // (It reads the warps' states before a barrier, and only then writes its scratch there.)
  merge::write_item_state<kWarp * kWarps>(a, it, merge_m, merge_l, merge_acc, kWarps, kHeads,
                                          shared);
}

}  // namespace kvcache::gpu::staged
