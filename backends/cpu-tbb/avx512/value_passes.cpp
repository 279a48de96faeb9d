// The value passes: the weights of a block of 16 times its values, into the accumulators.
#include "vectors.hpp"

namespace kvcache::cpu::avx512 {
namespace {

KVCACHE_KERNELS_BEGIN

// Adds the first n float32, fp16, bf16 or fp8 value rows times their weights, over parts of D so
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

// Quantized values meet their weights in integer dot products (see kLargestCode), two tokens at
// a time (vpdpwssd: int16 pairs into int32).

// Rounds 16 weights already scaled to at most kLargestCode to int16 codes (the narrowing
// saturates, for the hair by which the reciprocal may pass it).
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

// The loop both integer value passes share: rows in pairs, H vectors of a row per pass so that
// the G x H int32 sums stay in registers. `rows.pairs(j, vector, first, next)` gives vectors
// `vector` and `vector` + 1 of rows j and j + 1 as int16 pairs, `rows.codes(g, vector)` head g's
// weight codes for them, and `rows.finish(g, vector, sums)` adds head g's sums to its
// accumulator.
template <int G, int D, class Source>
KVCACHE_VNNI KVCACHE_INLINE void add_pairs(const Block16& b, const Source& rows) {
  constexpr int C = D / 16;
  constexpr int H = C < 16 / G ? C : 16 / G;  // vectors per pass, even
#pragma GCC unroll 8
  for (int pass = 0; pass < C; pass += H) {
    __m512i a[G][H];
    for (int g = 0; g < G; ++g)
      for (int h = 0; h < H; ++h) a[g][h] = _mm512_setzero_si512();
    for (std::uint32_t j = 0; j < b.n; j += 2) {
      if (pass == 0) prefetch_shares(b, kShares / 2 + j, 2);
      for (int h = 0; h < H; h += 2) {
        __m512i first, next;
        rows.pairs(j, pass + h, first, next);
        for (int g = 0; g < G; ++g) {
          const __m512i pair = code_pair(rows.codes(g, pass + h), j);
          dpwssd(a[g][h], first, pair);
          dpwssd(a[g][h + 1], next, pair);
        }
      }
    }
    for (int g = 0; g < G; ++g)
      for (int h = 0; h < H; ++h) rows.finish(g, pass + h, a[g][h]);
  }
}

// int8 rows: two rows' 32 codes, widened to int16, interleave into the pairs of elements 0..15
// and 16..31; the row scale multiplies the weight.
template <int D>
struct Int8Pairs {
  const std::int8_t* v;
  __m512i low, high;  // kInterleave
  const std::int16_t (*codes_of_head)[16];
  const float* unit;  // per head
  float* acc;
  KVCACHE_VNNI KVCACHE_INLINE void pairs(std::uint32_t j, int vector, __m512i& first,
                                         __m512i& next) const {
    const __m512i x = widen_int8(v + std::size_t{j} * D + 16 * vector);
    const __m512i y = widen_int8(v + std::size_t{j + 1} * D + 16 * vector);
    first = _mm512_permutex2var_epi16(x, low, y);
    next = _mm512_permutex2var_epi16(x, high, y);
  }
  const std::int16_t* codes(int g, int) const { return codes_of_head[g]; }
  KVCACHE_VNNI KVCACHE_INLINE void finish(int g, int vector, __m512i sums) const {
    float* out = acc + g * D + 16 * vector;
    _mm512_storeu_ps(out, _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_set1_ps(unit[g]),
                                          _mm512_loadu_ps(out)));
  }
};

template <int G, int D>
KVCACHE_VNNI void values16_int8(const Block16& b) {
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
  add_pairs<G, D>(
      b, Int8Pairs<D>{static_cast<const std::int8_t*>(b.v), _mm512_load_si512(kInterleave.low),
                      _mm512_load_si512(kInterleave.high), codes, unit, b.acc});
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

// int4 rows: a group's 16 bytes of two rows, widened to int16 words, split into low nibbles
// (even elements) and high ones (odd), interleave into the pairs of the group's elements 0..15
// and 16..31 (vectors 2 x group and 2 x group + 1); per (head, group) the weight codes, the step
// and the minima's sum.
template <int G, int D>
struct Int4Pairs {
  static constexpr int Groups = D / 32;
  const std::byte* v;
  __m512i low, high;  // kNibblePairs
  __m512i nibble;
  const std::int16_t (*codes_of)[Groups][16];
  const float (*unit)[Groups];
  const float* minimum_sum;  // [G][Groups]
  float* acc;
  KVCACHE_VNNI KVCACHE_INLINE void pairs(std::uint32_t j, int vector, __m512i& first,
                                         __m512i& next) const {
    const std::byte* row = v + std::size_t{j} * D / 2 + 16 * (vector / 2);
    const __m512i both = _mm512_cvtepu8_epi16(_mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + D / 2)), 1));
    const __m512i even = _mm512_and_si512(both, nibble);
    const __m512i odd = _mm512_srli_epi16(both, 4);
    first = _mm512_permutex2var_epi16(even, low, odd);
    next = _mm512_permutex2var_epi16(even, high, odd);
  }
  const std::int16_t* codes(int g, int vector) const { return codes_of[g][vector / 2]; }
  KVCACHE_VNNI KVCACHE_INLINE void finish(int g, int vector, __m512i sums) const {
    const int group = vector / 2;
    float* out = acc + g * D + 16 * vector;
    _mm512_storeu_ps(
        out, _mm512_add_ps(_mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_set1_ps(unit[g][group]),
                                           _mm512_loadu_ps(out)),
                           _mm512_set1_ps(minimum_sum[g * Groups + group])));
  }
};

// int4 values: per (head, group of 32) the weights times the group's scales, rounded against the
// head's largest weight times the group's largest scale; the minima times the weights make one
// sum per (head, group), added to the group's elements.
template <int G, int D>
KVCACHE_VNNI void values16_int4(const Block16& b) {
  static_assert(D == 64 || D == 128);
  constexpr int Groups = D / 32;
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
  add_pairs<G, D>(
      b, Int4Pairs<G, D>{static_cast<const std::byte*>(b.v), _mm512_load_si512(kNibblePairs.low),
                         _mm512_load_si512(kNibblePairs.high), _mm512_set1_epi16(0x0F), codes, unit,
                         minimum_sum, b.acc});
}

KVCACHE_KERNELS_END

}  // namespace

Pass16 value_pass(std::uint32_t group, std::uint32_t dim, Rows values) {
  return for_shape(group, dim, [values]<int G, int D>() {
    return for_kind(
        values, []<Rows R>() -> Pass16 { return &values16<G, D, R>; }, &values16_int8<G, D>,
        &values16_int4<G, D>);
  });
}

}  // namespace kvcache::cpu::avx512
