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

// Elements at..at+15 of float32, fp16 or bf16 rows as floats.
template <Rows R>
KVCACHE_AVX512 KVCACHE_INLINE __m512 load_floats16(const void* rows, std::size_t at) {
  if constexpr (R == Rows::float32) {
    return _mm512_loadu_ps(static_cast<const float*>(rows) + at);
  } else {
    static_assert(R == Rows::float16 || R == Rows::bfloat16);
    const __m256i codes = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(static_cast<const std::uint16_t*>(rows) + at));
    if constexpr (R == Rows::float16) return _mm512_cvtph_ps(codes);
    // bf16 is the top half of a float32.
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(codes), 16));
  }
}

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

// One head's base-2 softmax update for 16 logits in lane order (see SumOrder): lanes of missing
// slots get -inf; only a logit above m + kRescaleSlack raises m (and rescales what was
// accumulated); the weights are added to the head's lanes of l and go to `weight` in slot order.
template <int D>
KVCACHE_AVX512 KVCACHE_INLINE void softmax16(__m512 sums, __mmask16 present, float& m, float* l,
                                             float* acc, float* weight) {
  const __m512 logits = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), present, sums);
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
  _mm512_store_ps(weight, _mm512_permutexvar_ps(_mm512_load_si512(sum_order().lane_of_slot), p));
}

// Adds the first n value rows times their weights, over parts of D so that all accumulators
// stay in registers. The codes are dequantized through the weights: an int8 row's scale
// multiplies its weight; an int4 row's scales make one weight per group of 32 (code x scale),
// and its minima times the weights one sum per group, added to the group's elements at the end.
template <int G, int D, Rows V>
KVCACHE_AVX512 KVCACHE_INLINE void add_values16(const Block16& b, float (*weight)[16]) {
  constexpr int C = D / 16;                   // vectors per row
  constexpr int H = C < 16 / G ? C : 16 / G;  // vectors per pass over the values
  constexpr int Groups = V == Rows::int4 ? D / 32 : 1;
  alignas(64) float group_weight[G][Groups][16];
  float group_minimum[G][Groups];
  // int4 codes one per byte, unpacked once for all heads: 16 codes of a vector, each row's
  // vectors in the order the unpacking leaves them (see codes_at).
  alignas(64) std::uint8_t unpacked[V == Rows::int4 ? 16 : 1][D];
  const auto codes_at = [](int vector) { return vector % 2 * (D / 2) + vector / 2 * 16; };
  if constexpr (V == Rows::int8) {
    const __m512 scales = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << b.n) - 1), b.v_meta);
    for (int g = 0; g < G; ++g)
      _mm512_store_ps(weight[g], _mm512_mul_ps(_mm512_load_ps(weight[g]), scales));
  } else if constexpr (V == Rows::int4) {
    static_assert(D <= 128);
    // Row j: (scale, minimum) per group as floats; rows past n zeros.
    alignas(64) float params[16][8] = {};
    const auto* meta = static_cast<const std::byte*>(b.v_meta);
    const auto* packed = static_cast<const std::byte*>(b.v);
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    for (std::uint32_t j = 0; j < b.n; ++j) {
      // Low nibbles are the even elements, high ones the odd: interleaved, each 128-bit lane i
      // of `low` holds vector 2i (elements 32i..32i+15) and of `high` vector 2i + 1.
      const __m512i row = _mm512_maskz_loadu_epi8(
          D == 128 ? ~__mmask64{0} : (__mmask64{1} << (D / 2)) - 1, packed + j * D / 2);
      const __m512i even = _mm512_and_si512(row, nibble);
      const __m512i odd = _mm512_and_si512(_mm512_srli_epi16(row, 4), nibble);
      const __m512i low = _mm512_unpacklo_epi8(even, odd), high = _mm512_unpackhi_epi8(even, odd);
      if constexpr (D == 128) {
        _mm512_store_si512(unpacked[j], low);
        _mm512_store_si512(unpacked[j] + D / 2, high);
      } else {
        _mm256_store_si256(reinterpret_cast<__m256i*>(unpacked[j]), _mm512_castsi512_si256(low));
        _mm256_store_si256(reinterpret_cast<__m256i*>(unpacked[j] + D / 2),
                           _mm512_castsi512_si256(high));
      }
      const __m128i halves = D == 128
                                 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(meta + j * 16))
                                 : _mm_loadl_epi64(reinterpret_cast<const __m128i*>(meta + j * 8));
      _mm256_store_ps(params[j],
                      _mm512_castps512_ps256(_mm512_cvtph_ps(_mm256_zextsi128_si256(halves))));
    }
    const __m512i params_row = _mm512_slli_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 3);
    for (int i = 0; i < Groups; ++i) {
      const __m512 scale = _mm512_i32gather_ps(
          _mm512_add_epi32(params_row, _mm512_set1_epi32(2 * i)), &params[0][0], 4);
      const __m512 minimum = _mm512_i32gather_ps(
          _mm512_add_epi32(params_row, _mm512_set1_epi32(2 * i + 1)), &params[0][0], 4);
      for (int g = 0; g < G; ++g) {
        const __m512 w = _mm512_load_ps(weight[g]);
        _mm512_store_ps(group_weight[g][i], _mm512_mul_ps(w, scale));
        group_minimum[g][i] = _mm512_reduce_add_ps(_mm512_mul_ps(w, minimum));
      }
    }
  }
  for (int pass = 0; pass < C; pass += H) {
    __m512 a[G][H];
    for (int g = 0; g < G; ++g)
      for (int h = 0; h < H; ++h) a[g][h] = _mm512_loadu_ps(b.acc + g * D + 16 * (pass + h));
    for (std::uint32_t j = 0; j < b.n; ++j) {
      if (pass == 0) prefetch_shares(b, kShares / 2 + j, 1);
      __m512 vj[H];
      for (int h = 0; h < H; ++h) {
        const std::size_t at = std::size_t{j} * D + 16 * (pass + h);
        if constexpr (V == Rows::int8) {
          vj[h] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
              reinterpret_cast<const __m128i*>(static_cast<const std::int8_t*>(b.v) + at))));
        } else if constexpr (V == Rows::int4) {
          vj[h] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
              _mm_load_si128(reinterpret_cast<const __m128i*>(unpacked[j] + codes_at(pass + h)))));
        } else {
          vj[h] = load_floats16<V>(b.v, at);
        }
      }
      for (int g = 0; g < G; ++g) {
        if constexpr (V == Rows::int4) {
          for (int h = 0; h < H; ++h)
            a[g][h] =
                _mm512_fmadd_ps(_mm512_set1_ps(group_weight[g][(pass + h) / 2][j]), vj[h], a[g][h]);
        } else {
          const __m512 w = _mm512_set1_ps(weight[g][j]);
          for (int h = 0; h < H; ++h) a[g][h] = _mm512_fmadd_ps(w, vj[h], a[g][h]);
        }
      }
    }
    for (int g = 0; g < G; ++g)
      for (int h = 0; h < H; ++h) {
        if constexpr (V == Rows::int4)
          a[g][h] = _mm512_add_ps(a[g][h], _mm512_set1_ps(group_minimum[g][(pass + h) / 2]));
        _mm512_storeu_ps(b.acc + g * D + 16 * (pass + h), a[g][h]);
      }
  }
}

// A block of 16 float32, fp16 or bf16 keys for G query heads of dimension D, everything in
// registers: each key vector is loaded (and converted) once for all heads, 16 / G keys at a
// time so that 16 accumulators hold (head, key) pairs; one shuffle-reduction per 16 / G keys,
// its sums scattered to their head's logits, then the softmax and the values.
template <int G, int D, Rows K, Rows V>
KVCACHE_AVX512 void attend16(const Block16& b) {
  constexpr int T = 16 / G;  // keys per pass
  const __m512i slot = _mm512_load_si512(sum_order().slot_of_lane);
  const __mmask16 present = _mm512_cmplt_epi32_mask(slot, _mm512_set1_epi32(static_cast<int>(b.n)));
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
  alignas(64) float weight[G][16];
  for (int g = 0; g < G; ++g)
    softmax16<D>(_mm512_permutexvar_ps(slot, _mm512_load_ps(logits[g])), present, b.m[g], b.l + g * kLanes,
                 b.acc + g * D, weight[g]);
  add_values16<G, D, V>(b, weight);
}

// The same with 16 int8 keys and the quantized query: per chunk of 64, vpdpbusd multiplies
// unsigned by signed bytes, so the key codes are flipped to unsigned (k + 128, an xor) and
// 128 x the query chunk's code sum is taken off after. The integer sums are exact (below 2^24);
// the query chunk's scale and then each key's scale turn them into logits.
template <int G, int D, Rows V>
KVCACHE_VNNI void attend16_int8(const Block16& b) {
  constexpr int Chunks = D / static_cast<int>(kQueryChunk);
  const __m512i slot = _mm512_load_si512(sum_order().slot_of_lane);
  const __mmask16 present = _mm512_cmplt_epi32_mask(slot, _mm512_set1_epi32(static_cast<int>(b.n)));
  const __m512 k_scales =
      _mm512_permutexvar_ps(slot, _mm512_loadu_ps(static_cast<const float*>(b.k_meta)));
  const auto* k = static_cast<const std::int8_t*>(b.k);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  alignas(64) float weight[G][16];
  for (int g = 0; g < G; ++g) {
    prefetch_key_shares<G>(b, g);
    __m512 logits = _mm512_setzero_ps();
    for (int c = 0; c < Chunks; ++c) {
      const __m512i qc = _mm512_loadu_si512(b.q8->codes.data() + g * D + 64 * c);
      __m512 s[16];
      for (int j = 0; j < 16; ++j)
        s[j] = _mm512_castsi512_ps(_mm512_dpbusd_epi32(
            _mm512_setzero_si512(), _mm512_xor_si512(_mm512_loadu_si512(k + j * D + 64 * c), flip),
            qc));
      const __m512i dots = _mm512_sub_epi32(_mm512_castps_si512(sum_lanes16<AddInts>(s)),
                                            _mm512_set1_epi32(b.q8->bias[g * Chunks + c]));
      logits = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots),
                               _mm512_set1_ps(b.q8->steps[g * Chunks + c]), logits);
    }
    softmax16<D>(_mm512_mul_ps(logits, k_scales), present, b.m[g], b.l + g * kLanes, b.acc + g * D,
                 weight[g]);
  }
  add_values16<G, D, V>(b, weight);
}

// The same with 16 int4 keys (groups of 32; D of 64 or 128: one vector of packed codes at
// most). The low nibbles are the even elements and the high ones the odd elements, so a vector
// of each, against the query's even and odd codes, makes 32-bit lanes 4i..4i+3 the partial dot
// products of group i: per lane, times the group's scale and the query chunk's step, plus the
// group's minimum times the query codes' sum, then summed across lanes.
template <int G, int D, Rows V>
KVCACHE_VNNI void attend16_int4(const Block16& b) {
  static_assert(D == 64 || D == 128);
  constexpr __mmask64 half = D == 128 ? ~__mmask64{0} : (__mmask64{1} << (D / 2)) - 1;
  constexpr int MetaHalves = D / 32 * 2;  // (scale, minimum) per group
  const __m512i slot = _mm512_load_si512(sum_order().slot_of_lane);
  const __mmask16 present = _mm512_cmplt_epi32_mask(slot, _mm512_set1_epi32(static_cast<int>(b.n)));
  const auto* k = static_cast<const std::byte*>(b.k);
  const auto* meta = static_cast<const std::byte*>(b.k_meta);
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  // Lane 4i..4i+3 takes group i's scale (halves 2i) or minimum (2i + 1); past D, the zeros
  // loaded beyond the row's halves.
  const __m512i scale_of_lane = _mm512_set_epi32(6, 6, 6, 6, 4, 4, 4, 4, 2, 2, 2, 2, 0, 0, 0, 0);
  const __m512i minimum_of_lane = _mm512_set_epi32(7, 7, 7, 7, 5, 5, 5, 5, 3, 3, 3, 3, 1, 1, 1, 1);
  // Unpacked once for all heads.
  __m512i even[16], odd[16];
  __m512 scale[16], minimum[16];
  for (int j = 0; j < 16; ++j) {
    const __m512i packed = _mm512_maskz_loadu_epi8(half, k + j * D / 2);
    even[j] = _mm512_and_si512(packed, nibble);
    odd[j] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), nibble);
    const __m128i halves = MetaHalves == 8
                               ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(meta + j * 16))
                               : _mm_loadl_epi64(reinterpret_cast<const __m128i*>(meta + j * 8));
    const __m512 params = _mm512_cvtph_ps(_mm256_zextsi128_si256(halves));
    scale[j] = _mm512_permutexvar_ps(scale_of_lane, params);
    minimum[j] = _mm512_permutexvar_ps(minimum_of_lane, params);
  }
  alignas(64) float weight[G][16];
  for (int g = 0; g < G; ++g) {
    prefetch_key_shares<G>(b, g);
    const std::int8_t* codes = b.q8->codes.data() + g * D;
    const __m512i q_even = _mm512_maskz_loadu_epi8(half, codes);
    const __m512i q_odd = _mm512_maskz_loadu_epi8(half, codes + D / 2);
    const __m512 steps = _mm512_loadu_ps(b.q8->lane_steps.data() + 16 * g);
    const __m512 sums = _mm512_loadu_ps(b.q8->lane_sums.data() + 16 * g);
    __m512 s[16];
    for (int j = 0; j < 16; ++j) {
      const __m512i dots = _mm512_dpbusd_epi32(
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), even[j], q_even), odd[j], q_odd);
      s[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots), _mm512_mul_ps(scale[j], steps),
                             _mm512_mul_ps(minimum[j], sums));
    }
    softmax16<D>(sum_lanes16<AddFloats>(s), present, b.m[g], b.l + g * kLanes, b.acc + g * D, weight[g]);
  }
  add_values16<G, D, V>(b, weight);
}

using Attend16 = void (*)(const Block16&);

template <int G, int D, Rows V>
Attend16 for_keys(Rows keys) {
  switch (keys) {
    case Rows::float32:
      return &attend16<G, D, Rows::float32, V>;
    case Rows::float16:
      return &attend16<G, D, Rows::float16, V>;
    case Rows::bfloat16:
      return &attend16<G, D, Rows::bfloat16, V>;
    case Rows::int8:
      return &attend16_int8<G, D, V>;
    case Rows::int4:
      return &attend16_int4<G, D, V>;
  }
  return nullptr;
}

template <int G, int D>
Attend16 for_shape(Rows keys, Rows values) {
  switch (values) {
    case Rows::float16:
      return for_keys<G, D, Rows::float16>(keys);
    case Rows::bfloat16:
      return for_keys<G, D, Rows::bfloat16>(keys);
    case Rows::int8:
      return for_keys<G, D, Rows::int8>(keys);
    case Rows::float32:
      return for_keys<G, D, Rows::float32>(keys);
    case Rows::int4:
      return for_keys<G, D, Rows::int4>(keys);
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

// The kernel for a shape and row kinds, or null: keys float32, fp16 or bf16, or int8 and int4
// with VNNI; values of any kind.
Attend16 specialized(std::uint32_t group, std::uint32_t dim, Rows keys, Rows values) {
  if (!avx512() || ((keys == Rows::int8 || keys == Rows::int4) && !vnni())) return nullptr;
#define KVCACHE_CASE(G, D)                                            \
  do {                                                                \
    if (group == G && dim == D) return for_shape<G, D>(keys, values); \
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
  return nullptr;
}
constexpr std::uint32_t kMaxDim = 128;  // of the specialized shapes

std::size_t row_bytes(Rows kind, std::uint32_t dim) {
  switch (kind) {
    case Rows::float32:
      return dim * 4;
    case Rows::float16:
    case Rows::bfloat16:
      return dim * 2;
    case Rows::int8:
      return dim;
    case Rows::int4:
      return dim / 2;
  }
  return 0;
}
std::size_t meta_bytes(Rows kind, std::uint32_t dim) {
  return kind == Rows::int8 ? 4 : kind == Rows::int4 ? dim / 32 * 4 : 0;
}

}  // namespace

QuantizedQuery quantize_query(const float* q, std::uint32_t group, std::uint32_t dim, Rows keys) {
  const std::uint32_t chunks = dim / kQueryChunk;
  QuantizedQuery out;
  out.codes.resize(std::size_t{group} * dim);
  std::vector<std::int32_t> sums(std::size_t{group} * dim / 32);  // per group of 32
  std::vector<float> steps(std::size_t{group} * chunks);
  for (std::uint32_t c = 0; c < group * chunks; ++c) {
    const float* x = q + std::size_t{c} * kQueryChunk;
    float top = 0.0f;
    for (std::uint32_t i = 0; i < kQueryChunk; ++i) top = std::max(top, std::fabs(x[i]));
    steps[c] = top / 127.0f;
    for (std::uint32_t i = 0; i < kQueryChunk; ++i) {
      const std::size_t at = std::size_t{c} * kQueryChunk + i;
      const auto code =
          static_cast<std::int8_t>(steps[c] > 0.0f ? std::nearbyint(x[i] / steps[c]) : 0.0f);
      // int4 keys: even elements first, then odd ones, per head.
      const std::size_t head = at / dim, e = at % dim;
      out.codes[keys == Rows::int4 ? head * dim + (e % 2) * (dim / 2) + e / 2 : at] = code;
      sums[at / 32] += code;
    }
  }
  if (keys == Rows::int8) {
    out.steps = steps;
    for (std::uint32_t c = 0; c < group * chunks; ++c)
      out.bias.push_back(128 * (sums[2 * c] + sums[2 * c + 1]));
  } else {
    out.lane_steps.assign(std::size_t{group} * 16, 0.0f);
    out.lane_sums.assign(out.lane_steps.size(), 0.0f);
    for (std::uint32_t h = 0; h < group; ++h)
      for (std::uint32_t lane = 0; lane < std::min(16u, dim / 8); ++lane) {
        const std::uint32_t g = h * dim / 32 + lane / 4;  // lane's group of 32
        const float step = steps[g * 32 / kQueryChunk];
        out.lane_steps[h * 16 + lane] = step;
        out.lane_sums[h * 16 + lane] = step * static_cast<float>(sums[g]) / 4.0f;
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
  return specialized(group, dim, Rows::float32, kind) != nullptr;
}

bool takes_keys(Rows kind, std::uint32_t group, std::uint32_t dim) {
  return specialized(group, dim, kind, Rows::float32) != nullptr;
}

void attend_block(const float* q, const QuantizedQuery* q8, std::uint32_t group, std::uint32_t dim,
                  RowBlock k, RowBlock v, std::uint32_t n, SoftmaxState& state, float* logits) {
  if (const Attend16 fast = specialized(group, dim, k.kind, v.kind)) {
    const auto* keys = static_cast<const std::byte*>(k.rows);
    const auto* values = static_cast<const std::byte*>(v.rows);
    const std::size_t key_bytes = row_bytes(k.kind, dim), value_bytes = row_bytes(v.kind, dim);
    const std::uint32_t blocks = (n + 15) / 16;
    const auto lines = [&](const RowBlock& r) {
      return static_cast<std::uint32_t>(r.ahead == nullptr ? 0 : r.ahead_bytes / 64);
    };
    // The kernel reads 16 key rows: a partial block's are copied and padded with zeros (finite;
    // their weight is 0).
    alignas(64) std::byte pad[16 * kMaxDim * 4], pad_meta[16 * kMaxDim / 32 * 4];
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
                    state.acc.data()};
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
      fast(block);
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
