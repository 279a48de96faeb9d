#include "softmax_block.hpp"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "kvcache/status.hpp"

namespace kvcache::cpu {
namespace {

#define KVCACHE_AVX512 __attribute__((target("avx512f,avx512dq,avx512bw")))
// Integer dot products (vpdpbusd) on top of the above.
#define KVCACHE_VNNI __attribute__((target("avx512f,avx512dq,avx512bw,avx512vnni")))
#define KVCACHE_INLINE inline __attribute__((always_inline))

// GCC 12's AVX-512 headers warn about their own placeholders (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// 2^x: x = n + f with f in [-1/2, 1/2], 2^f by a degree-6 polynomial (relative error < 2e-7),
// then scaled by 2^n with vscalefps.
KVCACHE_AVX512 KVCACHE_INLINE __m512 exp2_avx512(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-126.0f));
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(1.5403530393381606e-4f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076284772e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108664821580e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650695910071e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718055994531e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

KVCACHE_AVX512 void exp2_avx512_n(float* x, std::uint32_t n) {
  std::uint32_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, exp2_avx512(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(x + i, tail, exp2_avx512(_mm512_maskz_loadu_ps(tail, x + i)));
  }
}

KVCACHE_AVX512 void logits_avx512(const float* q, std::uint32_t group, std::uint32_t dim,
                                  const float* k, std::uint32_t n, float* logits) {
  for (std::uint32_t j = 0; j < n; ++j) {
    const float* kj = k + std::size_t{j} * dim;
    for (std::uint32_t g = 0; g < group; ++g) {
      const float* qg = q + std::size_t{g} * dim;
      __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
      std::uint32_t i = 0;
      for (; i + 32 <= dim; i += 32) {
        a = _mm512_fmadd_ps(_mm512_loadu_ps(qg + i), _mm512_loadu_ps(kj + i), a);
        b = _mm512_fmadd_ps(_mm512_loadu_ps(qg + i + 16), _mm512_loadu_ps(kj + i + 16), b);
      }
      if (i < dim) a = _mm512_fmadd_ps(_mm512_loadu_ps(qg + i), _mm512_loadu_ps(kj + i), a);
      logits[std::size_t{g} * n + j] = _mm512_reduce_add_ps(_mm512_add_ps(a, b));
    }
  }
}

KVCACHE_AVX512 void accumulate_avx512(const float* weights, std::uint32_t group, std::uint32_t dim,
                                      const float* v, std::uint32_t n, float* acc) {
  for (std::uint32_t g = 0; g < group; ++g) {
    float* ag = acc + std::size_t{g} * dim;
    for (std::uint32_t i = 0; i < dim; i += 16) {
      __m512 a = _mm512_loadu_ps(ag + i);
      for (std::uint32_t j = 0; j < n; ++j)
        a = _mm512_fmadd_ps(_mm512_set1_ps(weights[std::size_t{g} * n + j]),
                            _mm512_loadu_ps(v + std::size_t{j} * dim + i), a);
      _mm512_storeu_ps(ag + i, a);
    }
  }
}

// Lane sums for sum_lanes16: float32, or int32 carried in float registers.
struct AddFloats {
  KVCACHE_AVX512 KVCACHE_INLINE __m512 operator()(__m512 a, __m512 b) const {
    return _mm512_add_ps(a, b);
  }
};
struct AddInts {
  KVCACHE_AVX512 KVCACHE_INLINE __m512 operator()(__m512 a, __m512 b) const {
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
  }
};

// Sums each of 16 vectors across its lanes: out lane i holds the sum of s[kSumOrder[i]].
// A shuffle network (about 3 instructions per vector) instead of 16 horizontal reductions.
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
const SumOrder& sum_order() {
  static const SumOrder order;
  return order;
}

KVCACHE_AVX512 KVCACHE_INLINE float exp2_scalar(float x) {
  return _mm512_cvtss_f32(exp2_avx512(_mm512_set1_ps(x)));
}

// Elements at..at+15 of float32, fp16, bf16 or fp8 rows as floats. fp8 E4M3 codes come out
// 2^-8 times their value (see kFp8Unit).
template <Rows R>
KVCACHE_AVX512 KVCACHE_INLINE __m512 load_floats16(const void* rows, std::size_t at) {
  if constexpr (R == Rows::float32) {
    return _mm512_loadu_ps(static_cast<const float*>(rows) + at);
  } else if constexpr (R == Rows::fp8) {
    // The sign and the 7 bits of exponent and mantissa moved to where fp16 keeps them (bit 15,
    // bits 13..7) read as fp16: the same number with an exponent bias of 15 instead of 7,
    // subnormals included.
    const __m256i wide = _mm256_cvtepi8_epi16(_mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const std::int8_t*>(rows) + at)));
    return _mm512_cvtph_ps(_mm256_and_si256(_mm256_slli_epi16(wide, 7),
                                            _mm256_set1_epi16(static_cast<short>(0xBFFF))));
  } else {
    static_assert(R == Rows::float16 || R == Rows::bfloat16);
    const __m256i codes = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(static_cast<const std::uint16_t*>(rows) + at));
    if constexpr (R == Rows::float16) return _mm512_cvtph_ps(codes);
    // bf16 is the top half of a float32.
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(codes), 16));
  }
}
// What an fp8 code read by load_floats16 is short of: it multiplies the row's scale.
inline constexpr float kFp8Unit = 256.0f;

// What a 16-key kernel reads: q (float, or quantized for int8/int4 keys), 16 key rows (zeros past
// n), up to 16 value rows, the tiles to prefetch, and the softmax state of the G heads.
struct Block16 {
  const float* q;
  const QuantizedQuery* q8;
  const void* k;
  const void* k_meta;  // int8 and int4 keys: 16 rows
  const void* v;
  const void* v_meta;  // int8 values: n rows
  std::uint32_t n;
  struct Ahead {
    const std::byte* from;
    std::uint32_t lines;
  } ahead[2];  // lines of the next K and V tiles asked for here
  float* m;
  float* l;
  float* acc;
  float* weight;  // [G][16], aligned: the key pass's weights in slot order, for the value pass
};

// Asks for shares [first, first + count) (of 32) of the prefetch lines, so they spread through
// the compute instead of leaving in one burst that overflows the L1 miss buffers: the key pass
// asks for shares 0..15, the value pass for 16..31 (one per row). Into L2 (hint 2), which leaves
// the L1 miss buffers to the loads (int8 about 1.2x faster here than with hint 3).
inline constexpr std::uint32_t kShares = 32;
KVCACHE_INLINE void prefetch_shares(const Block16& b, std::uint32_t first, std::uint32_t count) {
  for (const Block16::Ahead& a : b.ahead) {
    const std::uint32_t per_share = (a.lines + kShares - 1) / kShares;
    for (std::uint32_t i = first * per_share; i < std::min(a.lines, (first + count) * per_share);
         ++i)
      __builtin_prefetch(a.from + std::size_t{i} * 64, 0, 2);
  }
}
// The key pass's shares for head (or pass) g of G.
template <int G>
KVCACHE_INLINE void prefetch_key_shares(const Block16& b, int g) {
  prefetch_shares(b, static_cast<std::uint32_t>(g) * kShares / 2 / G, kShares / 2 / G);
}

// One head's base-2 softmax update for the logits of 16 slots, the first n present (the others
// get -inf): only a logit above m + kRescaleSlack raises m (and rescales what was accumulated);
// the weights are added to the head's lanes of l and go to `weight`.
template <int D>
KVCACHE_AVX512 KVCACHE_INLINE void softmax16(__m512 logits, std::uint32_t n, float& m, float* l,
                                             float* acc, float* weight) {
  const auto present = static_cast<__mmask16>((1u << n) - 1);
  logits = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), present, logits);
  if (_mm512_cmp_ps_mask(logits, _mm512_set1_ps(m + kRescaleSlack), _CMP_GT_OQ) != 0) {
    const float block_top = _mm512_reduce_max_ps(logits);
    if (m != -INFINITY) {
      const __m512 correction = _mm512_set1_ps(exp2_scalar(m - block_top));
      _mm512_storeu_ps(l, _mm512_mul_ps(_mm512_loadu_ps(l), correction));
      for (int c = 0; c < D / 16; ++c)
        _mm512_storeu_ps(acc + 16 * c, _mm512_mul_ps(_mm512_loadu_ps(acc + 16 * c), correction));
    }
    m = block_top;
  }
  const __m512 p =
      _mm512_maskz_mov_ps(present, exp2_avx512(_mm512_sub_ps(logits, _mm512_set1_ps(m))));
  _mm512_storeu_ps(l, _mm512_add_ps(_mm512_loadu_ps(l), p));
  _mm512_store_ps(weight, p);
}

// Adds the first n float32, fp16 or bf16 value rows times their weights, over parts of D so
// that all accumulators stay in registers.
template <int G, int D, Rows V>
KVCACHE_AVX512 void values16(const Block16& b) {
  constexpr int C = D / 16;                   // vectors per row
  constexpr int H = C < 16 / G ? C : 16 / G;  // vectors per pass over the values
  // fp8 rows' scales multiply their weights.
  alignas(64) float scaled[V == Rows::fp8 ? G : 1][16];
  const float* weight = b.weight;
  if constexpr (V == Rows::fp8) {
    const __m512 scales =
        _mm512_mul_ps(_mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << b.n) - 1), b.v_meta),
                      _mm512_set1_ps(kFp8Unit));
    for (int g = 0; g < G; ++g)
      _mm512_store_ps(scaled[g], _mm512_mul_ps(_mm512_load_ps(b.weight + 16 * g), scales));
    weight = &scaled[0][0];
  }
  for (int pass = 0; pass < C; pass += H) {
    __m512 a[G][H];
    for (int g = 0; g < G; ++g)
      for (int h = 0; h < H; ++h) a[g][h] = _mm512_loadu_ps(b.acc + g * D + 16 * (pass + h));
    for (std::uint32_t j = 0; j < b.n; ++j) {
      if (pass == 0) prefetch_shares(b, kShares / 2 + j, 1);
      __m512 vj[H];
      for (int h = 0; h < H; ++h)
        vj[h] = load_floats16<V>(b.v, std::size_t{j} * D + 16 * (pass + h));
      for (int g = 0; g < G; ++g) {
        const __m512 w = _mm512_set1_ps(weight[g * 16 + j]);
        for (int h = 0; h < H; ++h) a[g][h] = _mm512_fmadd_ps(w, vj[h], a[g][h]);
      }
    }
    for (int g = 0; g < G; ++g)
      for (int h = 0; h < H; ++h) _mm512_storeu_ps(b.acc + g * D + 16 * (pass + h), a[g][h]);
  }
}

// Quantized values meet their weights in integer dot products, two tokens at a time
// (vpdpwssd: int16 pairs into int32): per head, the block's weights times the rows' scales are
// rounded to int16 against a bound on them, so each is off by at most bound / 65534 (below
// 1/16 of what the int8 format itself loses, however the weights are spread), and the integer
// sums, exact, are scaled once per block.

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

// Rounds 16 weights already scaled to at most kLargestCode to int16 codes (the narrowing
// saturates, for the hair by which the reciprocal may pass it).
inline constexpr float kLargestCode = 32767.0f;
KVCACHE_AVX512 KVCACHE_INLINE void store_codes(__m512 scaled, std::int16_t* codes) {
  _mm256_store_si256(reinterpret_cast<__m256i*>(codes),
                     _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(scaled)));
}

// The int16 codes of tokens j and j + 1, as the 32-bit lane vpdpwssd multiplies by.
KVCACHE_AVX512 KVCACHE_INLINE __m512i code_pair(const std::int16_t* codes, std::uint32_t j) {
  std::int32_t pair;
  std::memcpy(&pair, codes + j, sizeof pair);
  return _mm512_set1_epi32(pair);
}

// Word indices for _mm512_permutex2var_epi16 that interleave two vectors of 32 words a and b:
// (a[i], b[i]) for i in [first, first + 16).
struct Interleave {
  alignas(64) std::int16_t low[32], high[32];
  constexpr Interleave() : low{}, high{} {
    for (int i = 0; i < 16; ++i) {
      low[2 * i] = static_cast<std::int16_t>(i);
      low[2 * i + 1] = static_cast<std::int16_t>(32 + i);
      high[2 * i] = static_cast<std::int16_t>(16 + i);
      high[2 * i + 1] = static_cast<std::int16_t>(48 + i);
    }
  }
};
inline constexpr Interleave kInterleave;

// acc += the products of a's and b's int16 pairs, summed per 32-bit lane (vpdpwssd). In inline
// assembly because GCC 12 copies an accumulator updated by the intrinsic in a loop to another
// register and back at every step.
KVCACHE_INLINE void dpwssd(__m512i& acc, __m512i a, __m512i b) {
  asm("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
}

// 32 int8 codes widened to int16.
KVCACHE_AVX512 KVCACHE_INLINE __m512i widen_int8(const std::int8_t* codes) {
  return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes)));
}

// The int8 row scale multiplies the weight; two rows' 32 codes, widened to int16, interleave
// into the pairs of elements 0..15 and 16..31.
template <int G, int D>
KVCACHE_VNNI void values16_int8(const Block16& b) {
  constexpr int C = D / 16;
  constexpr int H = C < 16 / G ? C : 16 / G;  // vectors per pass, even
  const __m512 scales = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << b.n) - 1), b.v_meta);
  alignas(64) std::int16_t codes[G][16];
  float unit[G];
  for (int g = 0; g < G; ++g) {
    const __m512 w = _mm512_mul_ps(_mm512_load_ps(b.weight + 16 * g), scales);
    const __m512 top = broadcast_max(w);
    store_codes(_mm512_mul_ps(w, _mm512_mul_ps(reciprocal(top), _mm512_set1_ps(kLargestCode))),
                codes[g]);
    unit[g] = _mm512_cvtss_f32(top) / kLargestCode;
  }
  const auto* v = static_cast<const std::int8_t*>(b.v);
  const __m512i low = _mm512_load_si512(kInterleave.low);
  const __m512i high = _mm512_load_si512(kInterleave.high);
#pragma GCC unroll 8
  for (int pass = 0; pass < C; pass += H) {
    __m512i a[G][H];
    for (int g = 0; g < G; ++g)
      for (int h = 0; h < H; ++h) a[g][h] = _mm512_setzero_si512();
    for (std::uint32_t j = 0; j < b.n; j += 2) {  // rows j and j + 1
      if (pass == 0) prefetch_shares(b, kShares / 2 + j, 2);
      for (int h = 0; h < H; h += 2) {
        const __m512i x = widen_int8(v + std::size_t{j} * D + 16 * (pass + h));
        const __m512i y = widen_int8(v + std::size_t{j + 1} * D + 16 * (pass + h));
        const __m512i first = _mm512_permutex2var_epi16(x, low, y);
        const __m512i next = _mm512_permutex2var_epi16(x, high, y);
        for (int g = 0; g < G; ++g) {
          const __m512i pair = code_pair(codes[g], j);
          dpwssd(a[g][h], first, pair);
          dpwssd(a[g][h + 1], next, pair);
        }
      }
    }
    for (int g = 0; g < G; ++g)
      for (int h = 0; h < H; ++h) {
        float* out = b.acc + g * D + 16 * (pass + h);
        _mm512_storeu_ps(out, _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[g][h]), _mm512_set1_ps(unit[g]),
                                              _mm512_loadu_ps(out)));
      }
  }
}

// Word indices for _mm512_permutex2var_epi16 over the low nibbles e and high nibbles o of two
// int4 rows' 16 bytes (row a in words 0..15, row b in 16..31): elements 2k and 2k + 1 are the
// nibbles of byte k, so the pairs of elements 0..15 are (e[k], e[16+k]), (o[k], o[16+k]) for
// k < 8, and of elements 16..31 the same for k in 8..15.
struct NibblePairs {
  alignas(64) std::int16_t low[32], high[32];
  constexpr NibblePairs() : low{}, high{} {
    for (int k = 0; k < 8; ++k)
      for (int half = 0; half < 2; ++half) {
        std::int16_t* to = half == 0 ? low : high;
        const int byte = 8 * half + k;
        to[4 * k] = static_cast<std::int16_t>(byte);
        to[4 * k + 1] = static_cast<std::int16_t>(16 + byte);
        to[4 * k + 2] = static_cast<std::int16_t>(32 + byte);
        to[4 * k + 3] = static_cast<std::int16_t>(48 + byte);
      }
  }
};
inline constexpr NibblePairs kNibblePairs;

// int4 rows carry an fp16 (scale, minimum) per group of 32: 16 rows' of them as float vectors
// over the rows (zeros past n), by two rounds of word permutes.
template <int D>
struct GroupParams {
  static constexpr int Groups = D / 32;
  __m512 scale[Groups], minimum[Groups];
};
template <int D>
struct MetaTranspose {
  // Round 1 (D = 128 only): rows r < 8 of the 8 halves per row in registers z0, z1 -> columns
  // 4c..4c+3 as 8 rows each. Round 2: two registers of (D = 128) 8 rows x 4 columns or (D = 64)
  // 16 rows x 4 columns -> a column pair (2i, 2i + 1) over the 16 rows.
  alignas(64) std::int16_t first[2][32], second[2][32];
  constexpr MetaTranspose() : first{}, second{} {
    for (int part = 0; part < 2; ++part)
      for (int c = 0; c < 4; ++c)
        for (int r = 0; r < 8; ++r)
          first[part][8 * c + r] = static_cast<std::int16_t>(8 * r + 4 * part + c);
    for (int pair = 0; pair < 2; ++pair)
      for (int c = 0; c < 2; ++c)
        for (int r = 0; r < 16; ++r)
          second[pair][16 * c + r] = static_cast<std::int16_t>(
              D == 128 ? (r < 8 ? 0 : 32) + 8 * (2 * pair + c) + r % 8 : 4 * r + 2 * pair + c);
  }
};
template <int D>
inline constexpr MetaTranspose<D> kMetaTranspose;

template <int D>
KVCACHE_AVX512 KVCACHE_INLINE GroupParams<D> group_params(const void* meta, std::uint32_t n) {
  constexpr int Halves = D / 32 * 2;  // per row
  const auto* words = static_cast<const std::int16_t*>(meta);
  __m512i z[D / 32];  // words 32i..32i+31, zeros past the n rows
  for (int i = 0; i < D / 32; ++i) {
    const int valid = std::clamp(static_cast<int>(n) * Halves - 32 * i, 0, 32);
    z[i] = _mm512_maskz_loadu_epi16(static_cast<__mmask32>((std::uint64_t{1} << valid) - 1),
                                    words + 32 * i);
  }
  const auto& t = kMetaTranspose<D>;
  __m512i pairs[D / 32];
  if constexpr (D == 128) {
    for (int part = 0; part < 2; ++part) {
      const __m512i top = _mm512_permutex2var_epi16(z[0], _mm512_load_si512(t.first[part]), z[1]);
      const __m512i bottom =
          _mm512_permutex2var_epi16(z[2], _mm512_load_si512(t.first[part]), z[3]);
      for (int pair = 0; pair < 2; ++pair)
        pairs[2 * part + pair] =
            _mm512_permutex2var_epi16(top, _mm512_load_si512(t.second[pair]), bottom);
    }
  } else {
    static_assert(D == 64);
    for (int pair = 0; pair < 2; ++pair)
      pairs[pair] = _mm512_permutex2var_epi16(z[0], _mm512_load_si512(t.second[pair]), z[1]);
  }
  GroupParams<D> out;
  for (int i = 0; i < D / 32; ++i) {
    out.scale[i] = _mm512_cvtph_ps(_mm512_castsi512_si256(pairs[i]));
    out.minimum[i] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(pairs[i], 1));
  }
  return out;
}

// int4 values: per (head, group of 32) the weights times the group's scales, rounded against the
// head's largest weight times the group's largest scale; the minima times the weights make one
// sum per (head, group), added to the group's elements.
template <int G, int D>
KVCACHE_VNNI void values16_int4(const Block16& b) {
  static_assert(D == 64 || D == 128);
  constexpr int C = D / 16, Groups = D / 32;
  constexpr int H = C < 16 / G ? C : 16 / G;  // vectors per pass, even: whole groups
  const GroupParams<D> params = group_params<D>(b.v_meta, b.n);
  alignas(64) std::int16_t codes[G][Groups][16];
  float unit[G][Groups];
  alignas(64) float minimum_sum[(G * Groups + 15) / 16 * 16];
  {
    // Weights scaled to at most kLargestCode per head, scales to at most 1 per group.
    __m512 scales[Groups];
    float top_scale[Groups];
    for (int i = 0; i < Groups; ++i) {
      const __m512 top = broadcast_max(params.scale[i]);
      scales[i] = _mm512_mul_ps(params.scale[i], reciprocal(top));
      top_scale[i] = _mm512_cvtss_f32(top);
    }
    __m512 terms[(G * Groups + 15) / 16 * 16];
    for (int g = 0; g < G; ++g) {
      const __m512 w = _mm512_load_ps(b.weight + 16 * g);
      const __m512 top = broadcast_max(w);
      const __m512 scaled =
          _mm512_mul_ps(w, _mm512_mul_ps(reciprocal(top), _mm512_set1_ps(kLargestCode)));
      for (int i = 0; i < Groups; ++i) {
        store_codes(_mm512_mul_ps(scaled, scales[i]), codes[g][i]);
        unit[g][i] = _mm512_cvtss_f32(top) * top_scale[i] / kLargestCode;
        terms[g * Groups + i] = _mm512_mul_ps(w, params.minimum[i]);
      }
    }
    for (int i = G * Groups; i < (G * Groups + 15) / 16 * 16; ++i) terms[i] = _mm512_setzero_ps();
    const __m512i lane_of_slot = _mm512_load_si512(sum_order().lane_of_slot);
    for (int i = 0; i < G * Groups; i += 16)
      _mm512_store_ps(minimum_sum + i,
                      _mm512_permutexvar_ps(lane_of_slot, sum_lanes16<AddFloats>(terms + i)));
  }
  const auto* v = static_cast<const std::byte*>(b.v);
  const __m512i low = _mm512_load_si512(kNibblePairs.low);
  const __m512i high = _mm512_load_si512(kNibblePairs.high);
  const __m512i nibble = _mm512_set1_epi16(0x0F);
#pragma GCC unroll 8
  for (int pass = 0; pass < C; pass += H) {
    __m512i a[G][H];
    for (int g = 0; g < G; ++g)
      for (int h = 0; h < H; ++h) a[g][h] = _mm512_setzero_si512();
    for (std::uint32_t j = 0; j < b.n; j += 2) {  // rows j and j + 1
      if (pass == 0) prefetch_shares(b, kShares / 2 + j, 2);
      for (int h = 0; h < H; h += 2) {
        const int group = (pass + h) / 2;
        const std::byte* row = v + std::size_t{j} * D / 2 + 16 * group;
        const __m512i both = _mm512_cvtepu8_epi16(_mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row))),
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + D / 2)), 1));
        const __m512i even = _mm512_and_si512(both, nibble);
        const __m512i odd = _mm512_srli_epi16(both, 4);
        const __m512i first = _mm512_permutex2var_epi16(even, low, odd);
        const __m512i next = _mm512_permutex2var_epi16(even, high, odd);
        for (int g = 0; g < G; ++g) {
          const __m512i pair = code_pair(codes[g][group], j);
          dpwssd(a[g][h], first, pair);
          dpwssd(a[g][h + 1], next, pair);
        }
      }
    }
    for (int g = 0; g < G; ++g)
      for (int h = 0; h < H; ++h) {
        const int group = (pass + h) / 2;
        float* out = b.acc + g * D + 16 * (pass + h);
        _mm512_storeu_ps(out, _mm512_add_ps(_mm512_fmadd_ps(_mm512_cvtepi32_ps(a[g][h]),
                                                            _mm512_set1_ps(unit[g][group]),
                                                            _mm512_loadu_ps(out)),
                                            _mm512_set1_ps(minimum_sum[g * Groups + group])));
      }
  }
}

// A block of 16 float32, fp16 or bf16 keys for G query heads of dimension D, everything in
// registers: each key vector is loaded (and converted) once for all heads, 16 / G keys at a
// time so that 16 accumulators hold (head, key) pairs; one shuffle-reduction per 16 / G keys,
// its sums scattered to their head's logits, then the softmax and the values.
template <int G, int D, Rows K>
KVCACHE_AVX512 void keys16(const Block16& b) {
  constexpr int T = 16 / G;  // keys per pass
  const __m512i slot = _mm512_load_si512(sum_order().slot_of_lane);
  // Lane i of a pass's sums is accumulator s = slot_of_lane[i]: head s / T, key s % T of the
  // pass, at logits[s / T][first key + s % T].
  const __m512i place =
      _mm512_add_epi32(_mm512_slli_epi32(_mm512_srli_epi32(slot, std::countr_zero(unsigned{T})), 4),
                       _mm512_and_si512(slot, _mm512_set1_epi32(T - 1)));
  alignas(64) float logits[G][16];
  for (int first = 0; first < 16; first += T) {
    prefetch_key_shares<G>(b, first / T);
    __m512 s[16];
    for (int i = 0; i < 16; ++i) s[i] = _mm512_setzero_ps();
    // Fixed trip counts unroll fully.
    for (int c = 0; c < D / 16; ++c) {
      __m512 k[T];
      for (int t = 0; t < T; ++t)
        k[t] = load_floats16<K>(b.k, static_cast<std::size_t>(first + t) * D + 16 * c);
      for (int g = 0; g < G; ++g) {
        const __m512 qc = _mm512_loadu_ps(b.q + g * D + 16 * c);
        for (int t = 0; t < T; ++t) s[g * T + t] = _mm512_fmadd_ps(qc, k[t], s[g * T + t]);
      }
    }
    _mm512_i32scatter_ps(&logits[0][0], _mm512_add_epi32(place, _mm512_set1_epi32(first)),
                         sum_lanes16<AddFloats>(s), 4);
  }
  // fp8 rows carry a scale each (16 here: a partial block's are padded).
  const __m512 row_scales =
      K == Rows::fp8 ? _mm512_mul_ps(_mm512_loadu_ps(static_cast<const float*>(b.k_meta)),
                                     _mm512_set1_ps(kFp8Unit))
                     : _mm512_set1_ps(1.0f);
  for (int g = 0; g < G; ++g)
    softmax16<D>(_mm512_mul_ps(_mm512_load_ps(logits[g]), row_scales), b.n, b.m[g],
                 b.l + g * kLanes, b.acc + g * D, b.weight + 16 * g);
}

// Integer keys meet the quantized query four tokens at a time: each token's vpdpbusd products
// are summed within 128-bit lanes (lane 4L + t: token t's part L), scaled there (the scales
// differ from part to part), and the parts summed across lanes, which leaves the 16 logits in
// token order.

// Lane 4L + t of the result: the sum of d[t]'s four lanes in 128-bit lane L.
KVCACHE_AVX512 KVCACHE_INLINE __m512i sum_within_lanes(const __m512i d[4]) {
  const __m512i a =
      _mm512_add_epi32(_mm512_unpacklo_epi32(d[0], d[1]), _mm512_unpackhi_epi32(d[0], d[1]));
  const __m512i b =
      _mm512_add_epi32(_mm512_unpacklo_epi32(d[2], d[3]), _mm512_unpackhi_epi32(d[2], d[3]));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

// Lane 4q + t of the result: the sum over L of lane 4L + t of f[q].
KVCACHE_AVX512 KVCACHE_INLINE __m512 sum_across_lanes(const __m512 f[4]) {
  const __m512 x =
      _mm512_add_ps(_mm512_shuffle_f32x4(f[0], f[1], 0x44), _mm512_shuffle_f32x4(f[0], f[1], 0xEE));
  const __m512 y =
      _mm512_add_ps(_mm512_shuffle_f32x4(f[2], f[3], 0x44), _mm512_shuffle_f32x4(f[2], f[3], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xDD));
}

// 128-bit lane L of out[q] = 128-bit lane q of in[L].
KVCACHE_AVX512 KVCACHE_INLINE void transpose_lanes(const __m512 in[4], __m512 out[4]) {
  const __m512 p0 = _mm512_shuffle_f32x4(in[0], in[1], 0x44);
  const __m512 p1 = _mm512_shuffle_f32x4(in[0], in[1], 0xEE);
  const __m512 p2 = _mm512_shuffle_f32x4(in[2], in[3], 0x44);
  const __m512 p3 = _mm512_shuffle_f32x4(in[2], in[3], 0xEE);
  out[0] = _mm512_shuffle_f32x4(p0, p2, 0x88);
  out[1] = _mm512_shuffle_f32x4(p0, p2, 0xDD);
  out[2] = _mm512_shuffle_f32x4(p1, p3, 0x88);
  out[3] = _mm512_shuffle_f32x4(p1, p3, 0xDD);
}

// 16 int8 keys: vpdpbusd multiplies unsigned by signed bytes, so the key codes are flipped to
// unsigned (k + 128, an xor) once for all heads, and 128 x the query's codes is taken off per
// part. With D = 128 each token's halves are rearranged as [0, 32) + [64, 96) and [32, 64) +
// [96, 128), so that parts 0 and 1 belong to the query's first chunk of 64 and parts 2 and 3 to
// its second (quantize_query orders the codes to match). The integer sums are exact; the part's
// query step and the key's scale turn them into logits.
template <int G, int D>
KVCACHE_VNNI void keys16_int8(const Block16& b) {
  static_assert(D == 64 || D == 128);
  const auto* k = static_cast<const std::int8_t*>(b.k);
  const auto* key_scales = static_cast<const float*>(b.k_meta);
  const QuantizedQuery& q8 = *b.q8;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 parts[G][4];
  for (int quad = 0; quad < 4; ++quad) {
    prefetch_key_shares<4>(b, quad);
    __m512i x[4], y[4];
    for (int t = 0; t < 4; ++t) {
      const std::int8_t* row = k + (4 * quad + t) * D;
      const __m512i low = _mm512_loadu_si512(row);
      if constexpr (D == 128) {
        const __m512i high = _mm512_loadu_si512(row + 64);
        x[t] = _mm512_xor_si512(_mm512_shuffle_i64x2(low, high, 0x44), flip);
        y[t] = _mm512_xor_si512(_mm512_shuffle_i64x2(low, high, 0xEE), flip);
      } else {
        x[t] = _mm512_xor_si512(low, flip);
      }
    }
    // Lane 4L + t: the scale of token 4 quad + t.
    const __m512 scales = _mm512_broadcast_f32x4(_mm_loadu_ps(key_scales + 4 * quad));
    for (int g = 0; g < G; ++g) {
      const std::int8_t* codes = q8.codes.data() + g * D;
      __m512i d[4];
      for (int t = 0; t < 4; ++t) {
        d[t] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), x[t], _mm512_loadu_si512(codes));
        if constexpr (D == 128)
          d[t] = _mm512_dpbusd_epi32(d[t], y[t], _mm512_loadu_si512(codes + 64));
      }
      const __m512i dots =
          _mm512_sub_epi32(sum_within_lanes(d), _mm512_loadu_si512(q8.lane_bias.data() + 16 * g));
      parts[g][quad] =
          _mm512_mul_ps(_mm512_cvtepi32_ps(dots),
                        _mm512_mul_ps(_mm512_loadu_ps(q8.lane_steps.data() + 16 * g), scales));
    }
  }
  for (int g = 0; g < G; ++g)
    softmax16<D>(sum_across_lanes(parts[g]), b.n, b.m[g], b.l + g * kLanes, b.acc + g * D,
                 b.weight + 16 * g);
}

// 16 int4 keys (groups of 32; D of 64 or 128: one vector of packed codes at most). The low
// nibbles are the even elements and the high ones the odd elements, so a vector of each,
// against the query's even and odd codes, makes part L group L: times the group's scale and
// the query chunk's step, plus the group's minimum times step x the query codes' sum.
template <int G, int D>
KVCACHE_VNNI void keys16_int4(const Block16& b) {
  static_assert(D == 64 || D == 128);
  constexpr __mmask64 half = D == 128 ? ~__mmask64{0} : (__mmask64{1} << (D / 2)) - 1;
  const auto* k = static_cast<const std::byte*>(b.k);
  const QuantizedQuery& q8 = *b.q8;
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  // Per quad, lane 4L + t: token 4 quad + t's scale and minimum of group L (zeros past D).
  __m512 scale[4], minimum[4];
  {
    const GroupParams<D> params = group_params<D>(b.k_meta, 16);
    __m512 by_group[4], minimum_by_group[4];
    for (int i = 0; i < 4; ++i) {
      by_group[i] = i < D / 32 ? params.scale[i % (D / 32)] : _mm512_setzero_ps();
      minimum_by_group[i] = i < D / 32 ? params.minimum[i % (D / 32)] : _mm512_setzero_ps();
    }
    transpose_lanes(by_group, scale);
    transpose_lanes(minimum_by_group, minimum);
  }
  __m512 parts[G][4];
  for (int quad = 0; quad < 4; ++quad) {
    prefetch_key_shares<4>(b, quad);
    __m512i even[4], odd[4];
    for (int t = 0; t < 4; ++t) {
      const __m512i packed = _mm512_maskz_loadu_epi8(half, k + (4 * quad + t) * D / 2);
      even[t] = _mm512_and_si512(packed, nibble);
      odd[t] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), nibble);
    }
    for (int g = 0; g < G; ++g) {
      const std::int8_t* codes = q8.codes.data() + g * D;
      const __m512i q_even = _mm512_maskz_loadu_epi8(half, codes);
      const __m512i q_odd = _mm512_maskz_loadu_epi8(half, codes + D / 2);
      __m512i d[4];
      for (int t = 0; t < 4; ++t)
        d[t] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), even[t], q_even),
                                   odd[t], q_odd);
      parts[g][quad] = _mm512_fmadd_ps(
          _mm512_cvtepi32_ps(sum_within_lanes(d)),
          _mm512_mul_ps(scale[quad], _mm512_loadu_ps(q8.lane_steps.data() + 16 * g)),
          _mm512_mul_ps(minimum[quad], _mm512_loadu_ps(q8.lane_sums.data() + 16 * g)));
    }
  }
  for (int g = 0; g < G; ++g)
    softmax16<D>(sum_across_lanes(parts[g]), b.n, b.m[g], b.l + g * kLanes, b.acc + g * D,
                 b.weight + 16 * g);
}

// A pass over a block of 16: keys to weights, or weights and values to the accumulators.
using Pass16 = void (*)(const Block16&);

template <int G, int D>
Pass16 key_pass(Rows keys) {
  switch (keys) {
    case Rows::float32:
      return &keys16<G, D, Rows::float32>;
    case Rows::float16:
      return &keys16<G, D, Rows::float16>;
    case Rows::bfloat16:
      return &keys16<G, D, Rows::bfloat16>;
    case Rows::fp8:
      return &keys16<G, D, Rows::fp8>;
    case Rows::int8:
      return &keys16_int8<G, D>;
    case Rows::int4:
      return &keys16_int4<G, D>;
  }
  return nullptr;
}

template <int G, int D>
Pass16 value_pass(Rows values) {
  switch (values) {
    case Rows::float32:
      return &values16<G, D, Rows::float32>;
    case Rows::float16:
      return &values16<G, D, Rows::float16>;
    case Rows::bfloat16:
      return &values16<G, D, Rows::bfloat16>;
    case Rows::fp8:
      return &values16<G, D, Rows::fp8>;
    case Rows::int8:
      return &values16_int8<G, D>;
    case Rows::int4:
      return &values16_int4<G, D>;
  }
  return nullptr;
}

#pragma GCC diagnostic pop

bool avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512bw");
  return yes;
}

// Read once; KVCACHE_CPU_NO_VNNI=1 keeps int8 keys on the float path (so that both paths can
// be tested on one machine).
bool vnni() {
  static const bool yes = [] {
    const char* off = std::getenv("KVCACHE_CPU_NO_VNNI");
    return avx512() && __builtin_cpu_supports("avx512vnni") &&
           (off == nullptr || std::string_view(off).empty() || std::string_view(off) == "0");
  }();
  return yes;
}

// The passes for a shape and row kinds, or nulls: keys and values float32, fp16 or bf16 where
// the CPU has AVX-512, int8 and int4 where it also has VNNI.
struct Kernel {
  Pass16 keys = nullptr, values = nullptr;
};
Kernel specialized(std::uint32_t group, std::uint32_t dim, Rows keys, Rows values) {
  const auto integer = [](Rows kind) { return kind == Rows::int8 || kind == Rows::int4; };
  if (!avx512() || ((integer(keys) || integer(values)) && !vnni())) return {};
#define KVCACHE_CASE(G, D)                                                               \
  do {                                                                                   \
    if (group == G && dim == D) return {key_pass<G, D>(keys), value_pass<G, D>(values)}; \
  } while (false)
  KVCACHE_CASE(1, 64);
  KVCACHE_CASE(2, 64);
  KVCACHE_CASE(4, 64);
  KVCACHE_CASE(8, 64);
  KVCACHE_CASE(1, 128);
  KVCACHE_CASE(2, 128);
  KVCACHE_CASE(4, 128);
  KVCACHE_CASE(8, 128);
#undef KVCACHE_CASE
  return {};
}
constexpr std::uint32_t kMaxDim = 128, kMaxGroup = 8;  // of the specialized shapes

std::size_t row_bytes(Rows kind, std::uint32_t dim) {
  switch (kind) {
    case Rows::float32:
      return dim * 4;
    case Rows::float16:
    case Rows::bfloat16:
      return dim * 2;
    case Rows::fp8:
    case Rows::int8:
      return dim;
    case Rows::int4:
      return dim / 2;
  }
  return 0;
}
std::size_t meta_bytes(Rows kind, std::uint32_t dim) {
  return kind == Rows::int8 || kind == Rows::fp8 ? 4 : kind == Rows::int4 ? dim / 32 * 4 : 0;
}

}  // namespace

QuantizedQuery quantize_query(const float* q, std::uint32_t group, std::uint32_t dim, Rows keys) {
  QuantizedQuery out;
  out.codes.resize(std::size_t{group} * dim);
  out.lane_steps.assign(std::size_t{group} * 16, 0.0f);
  if (keys == Rows::int8) out.lane_bias.assign(out.lane_steps.size(), 0);
  if (keys == Rows::int4) out.lane_sums.assign(out.lane_steps.size(), 0.0f);
  for (std::uint32_t h = 0; h < group; ++h) {
    for (std::uint32_t chunk = 0; chunk < dim / kQueryChunk; ++chunk) {
      const float* x = q + std::size_t{h} * dim + chunk * kQueryChunk;
      float top = 0.0f;
      for (std::uint32_t i = 0; i < kQueryChunk; ++i) top = std::max(top, std::fabs(x[i]));
      const float step = top / 127.0f;
      for (std::uint32_t i = 0; i < kQueryChunk; ++i) {
        const auto code =
            static_cast<std::int8_t>(step > 0.0f ? std::nearbyint(x[i] / step) : 0.0f);
        const std::uint32_t e = chunk * kQueryChunk + i;
        // Where the kernel wants the code (see keys16_int8 and keys16_int4), and the part of
        // its products (128-bit lane L: lanes 4L..4L+3 after the sums within lanes).
        std::uint32_t at = e, part = e / 32;
        if (keys == Rows::int8) {
          if (dim == 128 && e / 32 == 1) at = e + 32;
          if (dim == 128 && e / 32 == 2) at = e - 32;
          part = at % 64 / 16;
        } else {
          at = e % 2 * (dim / 2) + e / 2;  // even elements, then odd ones
        }
        out.codes[std::size_t{h} * dim + at] = code;
        for (std::uint32_t t = 0; t < 4; ++t) {
          const std::size_t lane = std::size_t{h} * 16 + 4 * part + t;
          out.lane_steps[lane] = step;
          if (keys == Rows::int8) out.lane_bias[lane] += 128 * code;
          if (keys == Rows::int4) out.lane_sums[lane] += step * static_cast<float>(code);
        }
      }
    }
  }
  return out;
}

void exp2_in_place(float* x, std::uint32_t n) {
  if (avx512()) {
    exp2_avx512_n(x, n);
    return;
  }
  for (std::uint32_t i = 0; i < n; ++i) x[i] = std::exp2(x[i]);
}

void block_logits(const float* q, std::uint32_t group, std::uint32_t dim, const float* k,
                  std::uint32_t n, float* logits) {
  if (avx512() && dim % 16 == 0) {
    logits_avx512(q, group, dim, k, n, logits);
    return;
  }
  for (std::uint32_t j = 0; j < n; ++j)
    for (std::uint32_t g = 0; g < group; ++g) {
      float dot = 0.0f;
      for (std::uint32_t i = 0; i < dim; ++i) dot += q[g * dim + i] * k[std::size_t{j} * dim + i];
      logits[std::size_t{g} * n + j] = dot;
    }
}

bool takes_values(Rows kind, std::uint32_t group, std::uint32_t dim) {
  return specialized(group, dim, Rows::float32, kind).values != nullptr;
}

bool takes_keys(Rows kind, std::uint32_t group, std::uint32_t dim) {
  return specialized(group, dim, kind, Rows::float32).keys != nullptr;
}

void attend_block(const float* q, const QuantizedQuery* q8, std::uint32_t group, std::uint32_t dim,
                  RowBlock k, RowBlock v, std::uint32_t n, SoftmaxState& state, float* logits) {
  if (const Kernel fast = specialized(group, dim, k.kind, v.kind); fast.keys != nullptr) {
    const auto* keys = static_cast<const std::byte*>(k.rows);
    const auto* values = static_cast<const std::byte*>(v.rows);
    const std::size_t key_bytes = row_bytes(k.kind, dim), value_bytes = row_bytes(v.kind, dim);
    const std::uint32_t blocks = (n + 15) / 16;
    const auto lines = [&](const RowBlock& r) {
      return static_cast<std::uint32_t>(r.ahead == nullptr ? 0 : r.ahead_bytes / 64);
    };
    // The kernel reads 16 key rows: a partial block's are copied and padded with zeros (finite;
    // their weight is 0).
    alignas(64) std::byte pad[16 * kMaxDim * 4], pad_meta[16 * kMaxDim / 32 * 4],
        pad_values[16 * kMaxDim];
    alignas(64) float weight[kMaxGroup * 16];
    const std::size_t key_meta = meta_bytes(k.kind, dim);
    for (std::uint32_t b = 0; b < blocks; ++b) {
      const std::uint32_t j = 16 * b, rows = std::min(16u, n - j);
      Block16 block{q,
                    q8,
                    keys + j * key_bytes,
                    static_cast<const std::byte*>(k.meta) + j * key_meta,
                    values + j * value_bytes,
                    static_cast<const std::byte*>(v.meta) + j * meta_bytes(v.kind, dim),
                    rows,
                    {},
                    state.m.data(),
                    state.l.data(),
                    state.acc.data(),
                    weight};
      // Each block asks for its share of the next tiles.
      const RowBlock* sides[2] = {&k, &v};
      for (int i = 0; i < 2; ++i) {
        const std::uint32_t all = lines(*sides[i]), first = all * b / blocks;
        block.ahead[i] = {sides[i]->ahead + std::size_t{first} * 64,
                          all * (b + 1) / blocks - first};
      }
      if (rows < 16) {
        std::memcpy(pad, block.k, rows * key_bytes);
        std::memset(pad + rows * key_bytes, 0, (16 - rows) * key_bytes);
        block.k = pad;
        if (key_meta > 0) {
          std::memcpy(pad_meta, block.k_meta, rows * key_meta);
          std::memset(pad_meta + rows * key_meta, 0, (16 - rows) * key_meta);
          block.k_meta = pad_meta;
        }
      }
      // The integer value passes read rows in pairs: an odd block's rows are copied and followed
      // by a row of zeros.
      if (rows % 2 == 1 && (v.kind == Rows::int8 || v.kind == Rows::int4)) {
        std::memcpy(pad_values, block.v, rows * value_bytes);
        std::memset(pad_values + rows * value_bytes, 0, value_bytes);
        block.v = pad_values;
      }
      fast.keys(block);
      fast.values(block);
    }
    return;
  }
  if (k.kind != Rows::float32 || v.kind != Rows::float32)
    throw Error(Code::internal, "attend_block: stored rows read in place need the AVX-512 kernel");
  const auto* kf = static_cast<const float*>(k.rows);
  const auto* vf = static_cast<const float*>(v.rows);
  block_logits(q, group, dim, kf, n, logits);
  for (std::uint32_t g = 0; g < group; ++g) {
    float* lg = logits + std::size_t{g} * n;
    const float block_max = *std::max_element(lg, lg + n);
    const float m = std::max(state.m[g], block_max);
    if (m != state.m[g]) state.rescale(g, std::exp2(state.m[g] - m), dim);  // 0 at first
    for (std::uint32_t j = 0; j < n; ++j) lg[j] -= m;
    exp2_in_place(lg, n);
    for (std::uint32_t j = 0; j < n; ++j) state.l[std::size_t{g} * kLanes + j % kLanes] += lg[j];
    state.m[g] = m;
  }
  if (avx512() && dim % 16 == 0) {
    accumulate_avx512(logits, group, dim, vf, n, state.acc.data());
    return;
  }
  for (std::uint32_t g = 0; g < group; ++g)
    for (std::uint32_t j = 0; j < n; ++j)
      for (std::uint32_t i = 0; i < dim; ++i)
        state.acc[std::size_t{g} * dim + i] +=
            logits[std::size_t{g} * n + j] * vf[std::size_t{j} * dim + i];
}

float SoftmaxState::weight_sum(std::uint32_t g) const {
  float sum = 0.0f;
  for (std::uint32_t i = 0; i < kLanes; ++i) sum += l[std::size_t{g} * kLanes + i];
  return sum;
}

void SoftmaxState::rescale(std::uint32_t g, float factor, std::uint32_t dim) {
  for (std::uint32_t i = 0; i < kLanes; ++i) l[std::size_t{g} * kLanes + i] *= factor;
  for (std::uint32_t i = 0; i < dim; ++i) acc[std::size_t{g} * dim + i] *= factor;
}

void SoftmaxState::merge(const SoftmaxState& other, std::uint32_t dim) {
  for (std::uint32_t g = 0; g < m.size(); ++g) {
    if (other.weight_sum(g) == 0.0f) continue;
    const float top = std::max(m[g], other.m[g]);
    const float mine = weight_sum(g) == 0.0f ? 0.0f : std::exp2(m[g] - top);
    const float theirs = std::exp2(other.m[g] - top);
    rescale(g, mine, dim);
    for (std::uint32_t i = 0; i < kLanes; ++i)
      l[std::size_t{g} * kLanes + i] += other.l[std::size_t{g} * kLanes + i] * theirs;
    for (std::uint32_t i = 0; i < dim; ++i)
      acc[std::size_t{g} * dim + i] += other.acc[std::size_t{g} * dim + i] * theirs;
    m[g] = top;
  }
}

}  // namespace kvcache::cpu
