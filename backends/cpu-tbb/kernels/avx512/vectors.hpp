// The vector arithmetic the AVX-512 passes share: exp2, lane sums, row loads, the softmax
// update, and int4 group parameters.
#pragma once

#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>

#include "kernels/block16.hpp"

#define KVCACHE_AVX512 __attribute__((target("avx512f,avx512dq,avx512bw")))
// Integer dot products (vpdpbusd, vpdpwssd) on top of the above.
#define KVCACHE_VNNI __attribute__((target("avx512f,avx512dq,avx512bw,avx512vnni")))
// And byte permutes (vpermb), for the int4 value pass.
#define KVCACHE_VBMI __attribute__((target("avx512f,avx512dq,avx512bw,avx512vnni,avx512vbmi")))
// GCC 12's AVX-512 headers warn about their own placeholders (GCC bug 105593): code using them
// sits between these.
#define KVCACHE_KERNELS_BEGIN                                                          \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"") \
      _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define KVCACHE_KERNELS_END _Pragma("GCC diagnostic pop")

namespace kvcache::cpu::avx512 {

// Four bytes of codes read as one 32-bit word, the memory operand of an embedded broadcast in
// inline assembly (may_alias: the bytes are stored as int8 or int16).
using AliasedWord = std::int32_t __attribute__((may_alias));

KVCACHE_KERNELS_BEGIN

// 2^x (kExp2Polynomial), scaled by 2^n with vscalefps; 0 in the lanes not in `keep`.
KVCACHE_AVX512 KVCACHE_INLINE __m512 exp2_avx512(__m512 x, __mmask16 keep = 0xFFFF) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-126.0f));
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(kExp2Polynomial[0]);
  for (std::size_t i = 1; i < std::size(kExp2Polynomial); ++i)
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kExp2Polynomial[i]));
  return _mm512_maskz_scalef_ps(keep, p, n);
}

// Lane sums for sum_lanes16: float32, or int32 carried in float registers (or, MaxFloats, lane
// maxima).
struct AddFloats {
  KVCACHE_AVX512 KVCACHE_INLINE __m512 operator()(__m512 a, __m512 b) const {
    return _mm512_add_ps(a, b);
  }
};
struct MaxFloats {
  KVCACHE_AVX512 KVCACHE_INLINE __m512 operator()(__m512 a, __m512 b) const {
    return _mm512_max_ps(a, b);
  }
};
struct AddInts {
  KVCACHE_AVX512 KVCACHE_INLINE __m512 operator()(__m512 a, __m512 b) const {
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
  }
};

// Sums each of 16 vectors across its lanes: out lane i holds the sum of
// s[sum_order().slot_of_lane[i]]. A shuffle network (about 3 instructions per vector) instead of 16
// horizontal reductions.
template <class Add>
KVCACHE_AVX512 KVCACHE_INLINE __m512 sum_lanes16(__m512 s[16]) {
  const Add add;
  __m512 a[8], b[4], c[2];
  for (int i = 0; i < 8; ++i)
    a[i] = add(_mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0x44),
               _mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0xEE));
  for (int i = 0; i < 4; ++i)
    b[i] = add(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x88),
               _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xDD));
  for (int i = 0; i < 2; ++i)
    c[i] =
        add(_mm512_unpacklo_ps(b[2 * i], b[2 * i + 1]), _mm512_unpackhi_ps(b[2 * i], b[2 * i + 1]));
  return add(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(c[0]), _mm512_castps_pd(c[1]))),
             _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(c[0]), _mm512_castps_pd(c[1]))));
}

// Which input each output lane of sum_lanes16 holds, and the inverse, found by running the
// network once.
struct SumOrder {
  alignas(64) std::int32_t slot_of_lane[16];
  alignas(64) std::int32_t lane_of_slot[16];
  KVCACHE_AVX512 SumOrder() {
    __m512 s[16];
    for (int j = 0; j < 16; ++j) s[j] = _mm512_set1_ps(static_cast<float>(j));
    alignas(64) float out[16];
    _mm512_store_ps(out, sum_lanes16<AddFloats>(s));
    for (int i = 0; i < 16; ++i) {
      slot_of_lane[i] = static_cast<std::int32_t>(out[i] / 16.0f);
      lane_of_slot[slot_of_lane[i]] = i;
    }
  }
};
inline const SumOrder& sum_order() {
  static const SumOrder order;
  return order;
}

KVCACHE_AVX512 KVCACHE_INLINE float exp2_scalar(float x) {
  return _mm512_cvtss_f32(exp2_avx512(_mm512_set1_ps(x)));
}

// Elements at..at+15 of float32, fp16, bf16 or fp8 rows as floats. fp8 E4M3 codes come out
// 2^-8 times their value (see kFp8Unit).
template <RowFormat R>
KVCACHE_AVX512 KVCACHE_INLINE __m512 load_floats16(const void* rows, std::size_t at) {
  if constexpr (R == RowFormat::float32) {
    return _mm512_loadu_ps(static_cast<const float*>(rows) + at);
  } else if constexpr (R == RowFormat::fp8) {
    // The sign and the 7 bits of exponent and mantissa moved to where fp16 keeps them (bit 15,
    // bits 13..7) read as fp16: the same number with an exponent bias of 15 instead of 7,
    // subnormals included.
    const __m256i wide = _mm256_cvtepi8_epi16(_mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const std::int8_t*>(rows) + at)));
    return _mm512_cvtph_ps(_mm256_and_si256(_mm256_slli_epi16(wide, 7),
                                            _mm256_set1_epi16(static_cast<short>(0xBFFF))));
  } else {
    static_assert(R == RowFormat::float16 || R == RowFormat::bfloat16);
    const __m256i codes = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(static_cast<const std::uint16_t*>(rows) + at));
    if constexpr (R == RowFormat::float16) return _mm512_cvtph_ps(codes);
    // bf16 is the top half of a float32.
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(codes), 16));
  }
}

// Raises a head's m to block_top, its block's largest logit, after rescaling what was
// accumulated against the old m (nothing yet while m is -inf): l, acc and the `earlier` weights
// before `weight` (the span's blocks waiting for their value pass).
template <int D>
KVCACHE_AVX512 KVCACHE_INLINE void raise_m(float block_top, float& m, float* l, float* acc,
                                           float* weight, std::uint32_t earlier) {
  if (m != -INFINITY) {
    const __m512 correction = _mm512_set1_ps(exp2_scalar(m - block_top));
    _mm512_storeu_ps(l, _mm512_mul_ps(_mm512_loadu_ps(l), correction));
    for (int c = 0; c < D / 16; ++c)
      _mm512_storeu_ps(acc + 16 * c, _mm512_mul_ps(_mm512_loadu_ps(acc + 16 * c), correction));
    for (float* w = weight - earlier; w != weight; w += 16)
      _mm512_store_ps(w, _mm512_mul_ps(_mm512_load_ps(w), correction));
  }
  m = block_top;
}

// A head's weights 2^x for the present lanes (zeros past them), added to its lanes of l and
// stored to `weight`.
KVCACHE_AVX512 KVCACHE_INLINE void add_weights(__m512 x, __mmask16 present, float* l,
                                               float* weight) {
  const __m512 p = exp2_avx512(x, present);
  _mm512_storeu_ps(l, _mm512_add_ps(_mm512_loadu_ps(l), p));
  _mm512_store_ps(weight, p);
}

// One head's base-2 softmax update for the logits of 16 slots, the first n present (the others
// get -inf): only a logit above m + kRescaleSlack raises m (and rescales what was accumulated);
// the weights are added to the head's lanes of l and go to `weight`. For the float kernels.
template <int D>
KVCACHE_AVX512 KVCACHE_INLINE void softmax16(__m512 logits, std::uint32_t n, float& m, float* l,
                                             float* acc, float* weight, std::uint32_t earlier) {
  // The lanes past n get -inf (cheaper than comparing under the mask for the fp16 kernels).
  const auto present = static_cast<__mmask16>((1u << n) - 1);
  logits = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), present, logits);
  if (_mm512_cmp_ps_mask(logits, _mm512_set1_ps(m + kRescaleSlack), _CMP_GT_OQ) != 0)
    raise_m<D>(_mm512_reduce_max_ps(logits), m, l, acc, weight, earlier);
  add_weights(_mm512_sub_ps(logits, _mm512_set1_ps(m)), present, l, weight);
}

// The same update for all G heads of a block at once, for the integer kernels: one comparison,
// of the largest of the heads' logits less their m, and one branch (a comparison and a branch per
// head showed in the int8 and int4 kernels on Zen 4, where vcmpps takes the pipe of the dot
// products; the fp16 kernels, though, were slower with it).
template <int G, int D>
KVCACHE_AVX512 KVCACHE_INLINE void softmax16_heads(const __m512 (&logits)[G], const Block16& b) {
  const auto present = static_cast<__mmask16>((1u << b.n) - 1);
  // logits - m is taken again below rather than held across the branch (GCC kept it on the
  // stack).
  __m512 top = _mm512_sub_ps(logits[0], _mm512_set1_ps(b.m[0]));
  for (int g = 1; g < G; ++g)
    top = _mm512_max_ps(top, _mm512_sub_ps(logits[g], _mm512_set1_ps(b.m[g])));
  top = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), present, top);
  if (_mm512_cmp_ps_mask(top, _mm512_set1_ps(kRescaleSlack), _CMP_GT_OQ) != 0) [[unlikely]] {
    for (int g = 0; g < G; ++g) {
      const float block_top = _mm512_mask_reduce_max_ps(present, logits[g]);
      if (block_top - b.m[g] > kRescaleSlack)
        raise_m<D>(block_top, b.m[g], b.l + g * kLanes, b.acc + g * D, b.weight + kSpan * g,
                   b.earlier);
    }
  }
  for (int g = 0; g < G; ++g)
    add_weights(_mm512_sub_ps(logits[g], _mm512_set1_ps(b.m[g])), present, b.l + g * kLanes,
                b.weight + kSpan * g);
}

// The largest of x's lanes, in every lane.
KVCACHE_AVX512 KVCACHE_INLINE __m512 broadcast_max(__m512 x) {
  x = _mm512_max_ps(x, _mm512_shuffle_f32x4(x, x, 0x4E));
  x = _mm512_max_ps(x, _mm512_shuffle_f32x4(x, x, 0xB1));
  x = _mm512_max_ps(x, _mm512_permute_ps(x, 0x4E));
  return _mm512_max_ps(x, _mm512_permute_ps(x, 0xB1));
}

// 1 / x in every lane, 0 where x is 0: the 14-bit estimate refined by a Newton step.
KVCACHE_AVX512 KVCACHE_INLINE __m512 reciprocal(__m512 x) {
  const __m512 r = _mm512_rcp14_ps(x);
  return _mm512_maskz_mul_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ), r,
                             _mm512_fnmadd_ps(x, r, _mm512_set1_ps(2.0f)));
}

// int4 rows carry an fp16 (scale, minimum) per group (of 32, 64 or 128 elements; Groups per row:
// 4, 2 or 1): 16 rows' of them as float vectors over the rows.
template <int Groups>
struct GroupParams {
  __m512 scale[Groups], minimum[Groups];
};

// Word indices that gather the (scale, minimum) pairs of 16 rows into [16 scales][16 minima] in
// row order. Groups = 4: from a group's pairs after the in-lane transposition of group_params,
// where 32-bit word 4l + i is row 4i + l's. Groups = 2: from two registers of 8 rows x 2 groups,
// one index per group. Groups = 1: from one register of 16 rows.
template <int Groups>
struct MetaOrder {
  alignas(64) std::int16_t index[Groups == 2 ? 2 : 1][32];
  constexpr MetaOrder() : index{} {
    for (int r = 0; r < 16; ++r)
      for (int half = 0; half < 2; ++half) {
        if constexpr (Groups == 4) {
          index[0][16 * half + r] = static_cast<std::int16_t>(2 * (4 * (r % 4) + r / 4) + half);
        } else if constexpr (Groups == 2) {
          for (int i = 0; i < 2; ++i)
            index[i][16 * half + r] = static_cast<std::int16_t>(4 * r + 2 * i + half);
        } else {
          index[0][16 * half + r] = static_cast<std::int16_t>(2 * r + half);
        }
      }
  }
};
template <int Groups>
inline constexpr MetaOrder<Groups> kMetaOrder;

// The group parameters of 16 rows (a partial block's are padded with zeros: see PendingValues),
// gathered per group by one word permute each; for groups of 32, after a 4 x 4 transposition by
// in-lane unpacks (eight single-uop shuffles instead of eight two-uop two-source word permutes).
template <int Groups>
KVCACHE_AVX512 KVCACHE_INLINE GroupParams<Groups> group_params(const void* meta) {
  static_assert(Groups == 1 || Groups == 2 || Groups == 4);
  const auto* words = static_cast<const std::int16_t*>(meta);
  __m512i z[Groups];  // words 32i..32i+31: 32 / (2 Groups) rows
  for (int i = 0; i < Groups; ++i) z[i] = _mm512_loadu_si512(words + 32 * i);
  const auto& order = kMetaOrder<Groups>;
  __m512i pairs[Groups];  // per group: [16 scales][16 minima]
  if constexpr (Groups == 4) {
    // 128-bit lane l of z[i] is row 4i + l's four pairs; transposed 4 x 4 within lanes.
    const __m512i low[2] = {_mm512_unpacklo_epi32(z[0], z[1]), _mm512_unpacklo_epi32(z[2], z[3])};
    const __m512i high[2] = {_mm512_unpackhi_epi32(z[0], z[1]), _mm512_unpackhi_epi32(z[2], z[3])};
    const __m512i by_group[4] = {
        _mm512_unpacklo_epi64(low[0], low[1]), _mm512_unpackhi_epi64(low[0], low[1]),
        _mm512_unpacklo_epi64(high[0], high[1]), _mm512_unpackhi_epi64(high[0], high[1])};
    for (int i = 0; i < 4; ++i)
      pairs[i] = _mm512_permutexvar_epi16(_mm512_load_si512(order.index[0]), by_group[i]);
  } else if constexpr (Groups == 2) {
    for (int i = 0; i < 2; ++i)
      pairs[i] = _mm512_permutex2var_epi16(z[0], _mm512_load_si512(order.index[i]), z[1]);
  } else {
    pairs[0] = _mm512_permutexvar_epi16(_mm512_load_si512(order.index[0]), z[0]);
  }
  GroupParams<Groups> out;
  for (int i = 0; i < Groups; ++i) {
    out.scale[i] = _mm512_cvtph_ps(_mm512_castsi512_si256(pairs[i]));
    out.minimum[i] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(pairs[i], 1));
  }
  return out;
}

KVCACHE_KERNELS_END

}  // namespace kvcache::cpu::avx512
