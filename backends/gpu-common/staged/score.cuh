// The staged kernel's scores (staged_attention.cuh): lane j's row of a staged K tile, whole,
// against every query head of the item. The format's per-row or per-group scale is applied once
// per row or group, not per element; integer keys meet the rounded queries in integer dot
// products.
#pragma once

#include <cstdint>

#include "queries.cuh"
#include "stage.cuh"

namespace kvcache::gpu::staged {

// logit[g] for the row at `row` (codes) and `meta` (its metadata, as staged); `group` is the
// format's group of int4 elements.
template <std::uint32_t kHeads, std::uint32_t kKind, std::uint32_t kDim>
KVC_INLINE void score_row(const Queries<kHeads, kKind, kDim>& q, const std::uint8_t* row,
                          const std::uint8_t* meta, std::uint32_t group, float (&logit)[kHeads]) {
  using T = Tile<kKind, kDim>;
  KVC_UNROLL
  for (std::uint32_t g = 0; g < kHeads; ++g) logit[g] = 0.0f;
  if constexpr (kKind == kInt8PerToken) {
    // Per block of the query: integer dot products of 16 bytes at a time, then its step.
    for (std::uint32_t b = 0; b < kDim / kQueryBlock; ++b) {
      std::int32_t sum[kHeads];
      KVC_UNROLL
      for (std::uint32_t g = 0; g < kHeads; ++g) sum[g] = 0;
      KVC_UNROLL
      for (std::uint32_t c = b * kQueryBlock / 16; c < (b + 1) * kQueryBlock / 16; ++c) {
        std::uint32_t w[4];
        load_words<4>(row + 16 * c, w);
        KVC_UNROLL
        for (std::uint32_t g = 0; g < kHeads; ++g) {
          std::uint32_t qw[4];
          load_words<4>(reinterpret_cast<const std::uint8_t*>(&q.rounded[g][16 * c]), qw);
          KVC_UNROLL
          for (std::uint32_t i = 0; i < 4; ++i) sum[g] = dot4(w[i], qw[i], sum[g]);
        }
      }
      KVC_UNROLL
      for (std::uint32_t g = 0; g < kHeads; ++g)
        logit[g] += static_cast<float>(sum[g]) * q.steps[g][b];
    }
  } else if constexpr (kKind == kInt4Group) {
    // Per granule of 32 (one group): the nibbles split into even and odd bytes, dotted with the
    // query's bytes in that order: scale x step x sum + minimum x sum of the rounded q.
    for (std::uint32_t c = 0; c < T::granules; ++c) {
      std::uint32_t w[4], even[4], odd[4];
      load_words<4>(row + 16 * c, w);
      KVC_UNROLL
      for (std::uint32_t i = 0; i < 4; ++i) {
        even[i] = w[i] & 0x0F0F0F0Fu;
        odd[i] = (w[i] >> 4) & 0x0F0F0F0Fu;
      }
      std::uint32_t pair;
      load_words<1>(meta + 4 * (c * 32 / group), &pair);
      float scale, minimum;
      halves_to_floats(pair, scale, minimum);
      KVC_UNROLL
      for (std::uint32_t g = 0; g < kHeads; ++g) {
        std::uint32_t qw[8];
        load_words<4>(reinterpret_cast<const std::uint8_t*>(&q.rounded[g][32 * c]), qw);
        load_words<4>(reinterpret_cast<const std::uint8_t*>(&q.rounded[g][32 * c + 16]), qw + 4);
        std::int32_t sum = 0;
        KVC_UNROLL
        for (std::uint32_t i = 0; i < 4; ++i)
          sum = dot4(odd[i], qw[2 * i + 1], dot4(even[i], qw[2 * i], sum));
        logit[g] += static_cast<float>(sum) * (scale * q.steps[g][c * 32 / kQueryBlock]) +
                    minimum * q.sums[g][c];
      }
    }
  } else {
    for (std::uint32_t c = 0; c < T::granules; ++c) {
      std::uint32_t w[4];
      load_words<4>(row + 16 * c, w);
      float x[T::per_granule];
      decode_codes<kKind, T::per_granule>(w, x);
      KVC_UNROLL
      for (std::uint32_t g = 0; g < kHeads; ++g) {
        float part = 0.0f;
        KVC_UNROLL
        for (std::uint32_t e = 0; e < T::per_granule; e += 4) {
          float qf[4];
          load_floats4(&q.scaled[g][c * T::per_granule + e], qf);
          part += qf[0] * x[e] + qf[1] * x[e + 1] + qf[2] * x[e + 2] + qf[3] * x[e + 3];
        }
        logit[g] += part;
      }
    }
  }
  if constexpr (kKind == kInt8PerToken || kKind == kFp8E4M3) {
    std::uint32_t bits;
    load_words<1>(meta, &bits);
    KVC_UNROLL
    for (std::uint32_t g = 0; g < kHeads; ++g) logit[g] *= bits_float(bits);
  }
}

}  // namespace kvcache::gpu::staged
