// The staged kernel's values (staged_attention.cuh): each lane adds its head_dim / kWarp output
// dimensions of every row of a staged V tile, weighted, to every head's state: nothing crosses
// lanes until the block's warps combine.
#pragma once

#include <cstdint>

#include "softmax.cuh"
#include "stage.cuh"

namespace kvcache::gpu::staged {

// The first `rows` rows of the tile in `buffer`, with the weights softmax_step left for them;
// `group` is the format's group of int4 elements.
template <std::uint32_t kHeads, std::uint32_t kKind, std::uint32_t kDim>
KVC_INLINE void add_values(SoftmaxState<kHeads, Tile<kKind, kDim>::lane_dims>& s,
                           const std::uint8_t* buffer, std::uint32_t rows,
                           const float (&weights)[kRows][kHeads], std::uint32_t lane,
                           std::uint32_t group) {
  using T = Tile<kKind, kDim>;
  constexpr std::uint32_t kLaneBytes = T::lane_dims * T::bits / 8;
  const std::uint32_t d0 = lane * T::lane_dims;
  const std::uint8_t* meta = buffer + kRows * T::stride;
  for (std::uint32_t r = 0; r < rows; ++r) {
    std::uint32_t w[kLaneBytes >= 4 ? kLaneBytes / 4 : 1];
    load_codes<kLaneBytes>(buffer + r * T::stride + d0 * T::bits / 8, w);
    // A lane of one int4 dimension (warps of 64 at head_dim 64) shares its byte: odd lanes take
    // the high nibble.
    if constexpr (kKind == kInt4Group && T::lane_dims == 1) w[0] >>= 4 * (d0 % 2);
    float x[T::lane_dims];
    decode_codes<kKind, T::lane_dims>(w, x);
    float p[kHeads];
    KVC_UNROLL
    for (std::uint32_t g = 0; g < kHeads; g += 4) {
      if constexpr (kHeads >= 4)
        load_floats4(&weights[r][g], p + g);
      else
        p[g] = weights[r][g];
    }
    if constexpr (kKind == kInt8PerToken || kKind == kFp8E4M3) {
      std::uint32_t bits;
      load_words<1>(meta + r * T::max_meta, &bits);
      KVC_UNROLL
      for (std::uint32_t g = 0; g < kHeads; ++g) p[g] *= bits_float(bits);
    } else if constexpr (kKind == kInt4Group) {
      std::uint32_t pair;
      load_words<1>(meta + r * T::max_meta + 4 * (d0 / group), &pair);
      float scale, minimum;
      halves_to_floats(pair, scale, minimum);
      KVC_UNROLL
      for (std::uint32_t g = 0; g < kHeads; ++g) {
        s.bias[g] += p[g] * minimum;
        p[g] *= scale;
      }
    }
    KVC_UNROLL
    for (std::uint32_t g = 0; g < kHeads; ++g) {
      KVC_UNROLL
      for (std::uint32_t d = 0; d < T::lane_dims; ++d) s.acc[g][d] += p[g] * x[d];
    }
  }
}

}  // namespace kvcache::gpu::staged
