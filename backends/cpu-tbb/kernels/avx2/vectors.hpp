// The vector arithmetic the AVX2 passes share: exp2, lane sums, row loads, int16 dot products,
// int4 group parameters and the softmax update. AVX2 has 16 vector registers of 8 floats, so
// the passes work on 8 (head, key) pairs or 8 accumulators at a time.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>

#include "kernels/block16.hpp"

#define KVCACHE_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace kvcache::cpu::avx2 {

// 2^x for x >= -126 (kExp2Polynomial), scaled by 2^n through the exponent field; below -126
// it gives 2^-126 (the callers mask absent lanes and rescale only by less).
KVCACHE_AVX2 KVCACHE_INLINE __m256 exp2_avx2(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-126.0f));
  const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(x, n);
  __m256 p = _mm256_set1_ps(kExp2Polynomial[0]);
  for (std::size_t i = 1; i < std::size(kExp2Polynomial); ++i)
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(kExp2Polynomial[i]));
  const __m256i exponent =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(exponent));
}

// The pieces of sum_lanes8 for float32 and int32 lanes.
KVCACHE_AVX2 KVCACHE_INLINE __m256 pairwise_sums(__m256 a, __m256 b) {
  return _mm256_hadd_ps(a, b);
}
KVCACHE_AVX2 KVCACHE_INLINE __m256i pairwise_sums(__m256i a, __m256i b) {
  return _mm256_hadd_epi32(a, b);
}
KVCACHE_AVX2 KVCACHE_INLINE __m256 add_halves(__m256 a, __m256 b) {
  return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}
KVCACHE_AVX2 KVCACHE_INLINE __m256i add_halves(__m256i a, __m256i b) {
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                          _mm256_permute2x128_si256(a, b, 0x31));
}

// Lane i of the result: the sum of s[i]'s lanes (three rounds of pairwise sums, then the halves).
template <class V>
KVCACHE_AVX2 KVCACHE_INLINE V sum_lanes8(const V s[8]) {
  const V a = pairwise_sums(pairwise_sums(s[0], s[1]), pairwise_sums(s[2], s[3]));
  const V b = pairwise_sums(pairwise_sums(s[4], s[5]), pairwise_sums(s[6], s[7]));
  return add_halves(a, b);
}

// The largest of x's lanes.
KVCACHE_AVX2 KVCACHE_INLINE float max_lane(__m256 x) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

// Elements at..at+7 of float32, fp16, bf16 or fp8 rows as floats; fp8 E4M3 codes as in the
// AVX-512 family (moved to where fp16 keeps them: 2^-8 times their value, see kFp8Unit).
template <RowFormat R>
KVCACHE_AVX2 KVCACHE_INLINE __m256 load_floats8(const void* rows, std::size_t at) {
  if constexpr (R == RowFormat::float32) {
    return _mm256_loadu_ps(static_cast<const float*>(rows) + at);
  } else if constexpr (R == RowFormat::fp8) {
    const __m128i wide = _mm_cvtepi8_epi16(_mm_loadl_epi64(
        reinterpret_cast<const __m128i*>(static_cast<const std::int8_t*>(rows) + at)));
    return _mm256_cvtph_ps(
        _mm_and_si128(_mm_slli_epi16(wide, 7), _mm_set1_epi16(static_cast<short>(0xBFFF))));
  } else {
    static_assert(R == RowFormat::float16 || R == RowFormat::bfloat16);
    const __m128i codes = _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(rows) + at));
    if constexpr (R == RowFormat::float16) return _mm256_cvtph_ps(codes);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(codes), 16));
  }
}

// acc += the products of a's and b's int16 pairs, summed per 32-bit lane: vpmaddwd and an add,
// or AVX-VNNI's vpdpwssd (VEX-encoded; inline assembly, so no function needs the target).
struct MaddDot {
  KVCACHE_AVX2 KVCACHE_INLINE static void add(__m256i& acc, __m256i a, __m256i b) {
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
  }
};
struct VnniDot {
  KVCACHE_AVX2 KVCACHE_INLINE static void add(__m256i& acc, __m256i a, __m256i b) {
    asm("%{vex%} vpdpwssd %2, %1, %0" : "+x"(acc) : "x"(a), "xm"(b));
  }
};

// Lane i: p[i % T] (the T keys of a pass, once per head).
template <int T>
KVCACHE_AVX2 KVCACHE_INLINE __m256 per_key(const float* p) {
  if constexpr (T == 8) return _mm256_loadu_ps(p);
  if constexpr (T == 4) return _mm256_broadcast_ps(reinterpret_cast<const __m128*>(p));
  if constexpr (T == 2)
    return _mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(p)));
  if constexpr (T == 1) return _mm256_broadcast_ss(p);
}

// int4 rows' fp16 (scale, minimum) per group (Groups per row: 4, 2 or 1), for 16 rows by group:
// scale[g][r] and minimum[g][r], zeros past n rows.
template <int Groups>
struct GroupParams {
  alignas(32) float scale[Groups][16];
  alignas(32) float minimum[Groups][16];
};
template <int Groups>
KVCACHE_AVX2 KVCACHE_INLINE void load_group_params(const void* meta, std::uint32_t n,
                                                   GroupParams<Groups>& out) {
  static_assert(Groups == 1 || Groups == 2 || Groups == 4);
  const auto* halves = static_cast<const std::uint16_t*>(meta);
  alignas(32) float row[8];
  for (std::uint32_t r = 0; r < 16; ++r) {
    if (r < n) {
      const std::uint16_t* at = halves + 2 * Groups * r;
      const __m128i codes =
          Groups == 4   ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(at))
          : Groups == 2 ? _mm_loadl_epi64(reinterpret_cast<const __m128i*>(at))
                        : _mm_cvtsi32_si128(static_cast<int>(at[0] | std::uint32_t{at[1]} << 16));
      _mm256_store_ps(row, _mm256_cvtph_ps(codes));
    } else {
      _mm256_store_ps(row, _mm256_setzero_ps());
    }
    for (int g = 0; g < Groups; ++g) {
      out.scale[g][r] = row[2 * g];
      out.minimum[g][r] = row[2 * g + 1];
    }
  }
}

// One head's base-2 softmax update for the logits of 16 slots, the first n present, as in the
// AVX-512 family: only a logit above m + kRescaleSlack raises m (and rescales what was
// accumulated); the weights are added to the head's lanes of l and go to `weight`.
template <int D>
KVCACHE_AVX2 KVCACHE_INLINE void softmax16(const float* logits, std::uint32_t n, float& m, float* l,
                                           float* acc, float* weight) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i count = _mm256_set1_epi32(static_cast<int>(n));
  __m256 present[2], x[2];
  for (int h = 0; h < 2; ++h) {
    present[h] = _mm256_castsi256_ps(
        _mm256_cmpgt_epi32(count, _mm256_add_epi32(index, _mm256_set1_epi32(8 * h))));
    x[h] = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_loadu_ps(logits + 8 * h), present[h]);
  }
  const __m256 top = _mm256_max_ps(x[0], x[1]);
  if (_mm256_movemask_ps(_mm256_cmp_ps(top, _mm256_set1_ps(m + kRescaleSlack), _CMP_GT_OQ)) != 0) {
    const float block_top = max_lane(top);
    if (m != -INFINITY) {
      const __m256 correction = exp2_avx2(_mm256_set1_ps(m - block_top));
      for (int h = 0; h < 2; ++h)
        _mm256_storeu_ps(l + 8 * h, _mm256_mul_ps(_mm256_loadu_ps(l + 8 * h), correction));
      for (int c = 0; c < D / 8; ++c)
        _mm256_storeu_ps(acc + 8 * c, _mm256_mul_ps(_mm256_loadu_ps(acc + 8 * c), correction));
    }
    m = block_top;
  }
  for (int h = 0; h < 2; ++h) {
    const __m256 p = _mm256_and_ps(present[h], exp2_avx2(_mm256_sub_ps(x[h], _mm256_set1_ps(m))));
    _mm256_storeu_ps(l + 8 * h, _mm256_add_ps(_mm256_loadu_ps(l + 8 * h), p));
    _mm256_store_ps(weight + 8 * h, p);
  }
}

}  // namespace kvcache::cpu::avx2
