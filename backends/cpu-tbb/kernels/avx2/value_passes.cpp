// The AVX2 value passes: the weights of a block of 16 times its values, into the accumulators,
// over parts of D so that at most 8 accumulators stay in registers (groups of 5 to 8: one vector
// a pass, each value vector converted once for all heads).
#include <algorithm>
#include <cstring>

#include "kernels/avx2/vectors.hpp"

namespace kvcache::cpu::avx2 {
namespace {

// Adds the first n float32, fp16, bf16 or fp8 value rows times their weights (fp8 rows' scales
// multiply their weights).
template <int G, int D, RowFormat V>
KVCACHE_AVX2 void values16(const Block16& b) {
  constexpr int C = D / 8;                            // vectors per row
  constexpr int H = std::min(C, std::max(1, 8 / G));  // vectors per pass
  alignas(32) float scaled[V == RowFormat::fp8 ? G : 1][16];
  const float* weight = b.weight;
  std::size_t row = kSpan;  // floats from one head's weights to the next's
  if constexpr (V == RowFormat::fp8) {
    alignas(32) float scales[16] = {};
    std::copy_n(static_cast<const float*>(b.v_meta), b.n, scales);
    for (int g = 0; g < G; ++g)
      for (int h = 0; h < 2; ++h)
        _mm256_store_ps(
            scaled[g] + 8 * h,
            _mm256_mul_ps(_mm256_load_ps(b.weight + kSpan * g + 8 * h),
                          _mm256_mul_ps(_mm256_load_ps(scales + 8 * h), _mm256_set1_ps(kFp8Unit))));
    weight = &scaled[0][0];
    row = 16;
  }
  for (int pass = 0; pass < C; pass += H) {
    __m256 a[G][H];
    for (int g = 0; g < G; ++g)
      for (int h = 0; h < H; ++h) a[g][h] = _mm256_loadu_ps(b.acc + g * D + 8 * (pass + h));
    for (std::uint32_t j = 0; j < b.n; ++j) {
      if (pass == 0) prefetch_shares(b, kShares / 2 + j, 1);
      for (int h = 0; h < H; ++h) {
        const __m256 v = load_floats8<V>(b.v, std::size_t{j} * D + 8 * (pass + h));
        for (int g = 0; g < G; ++g)
          a[g][h] = _mm256_fmadd_ps(_mm256_broadcast_ss(weight + g * row + j), v, a[g][h]);
      }
    }
    for (int g = 0; g < G; ++g)
      for (int h = 0; h < H; ++h) _mm256_storeu_ps(b.acc + g * D + 8 * (pass + h), a[g][h]);
  }
}

// 16 weights (two vectors) times kLargestCode / bound rounded to int16 codes; the bound is
// their largest (the unit of a code is then bound / kLargestCode).
KVCACHE_AVX2 KVCACHE_INLINE float store_codes(const __m256 w[2], std::int16_t* codes) {
  const float bound = max_lane(_mm256_max_ps(w[0], w[1]));
  const __m256 factor = _mm256_set1_ps(bound > 0.0f ? kLargestCode / bound : 0.0f);
  // vpackssdw packs per 128-bit half: the quarters come out as 0, 2, 1, 3.
  const __m256i packed = _mm256_packs_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(w[0], factor)),
                                            _mm256_cvtps_epi32(_mm256_mul_ps(w[1], factor)));
  _mm256_store_si256(reinterpret_cast<__m256i*>(codes), _mm256_permute4x64_epi64(packed, 0xD8));
  return bound / kLargestCode;
}

// The loop both integer value passes share, for the sweep of heads First.. of G and those after
// it: rows in pairs, heads in sweeps of at most 4 and H vectors of 8 elements per pass so that
// the 8 int32 sums stay in registers. `rows.pairs(j, vector, first, next)` gives elements
// 8 vector .. 8 vector + 15 of rows j and j + 1 as int16 pairs (two vectors), `rows.codes(g,
// vector)` head g's weight codes for them, and `rows.finish(g, vector, sums)` adds head g's sums
// to its accumulator.
template <int G, int D, class Dot, class Source, int First = 0>
KVCACHE_AVX2 KVCACHE_INLINE void add_pairs(const Block16& b, const Source& rows) {
  if constexpr (First < G) {
    constexpr int C = D / 8;
    constexpr int S = std::min(G - First, 4);           // heads of the sweep
    constexpr int H = std::min(C, std::max(2, 8 / S));  // vectors per pass, even
    for (int pass = 0; pass < C; pass += H) {
      __m256i a[S][H];
      for (int g = 0; g < S; ++g)
        for (int h = 0; h < H; ++h) a[g][h] = _mm256_setzero_si256();
      for (std::uint32_t j = 0; j < b.n; j += 2) {
        if (First == 0 && pass == 0) prefetch_shares(b, kShares / 2 + j, 2);
        for (int h = 0; h < H; h += 2) {
          __m256i first, next;
          rows.pairs(j, pass + h, first, next);
          for (int g = 0; g < S; ++g) {
            std::int32_t pair;
            std::memcpy(&pair, rows.codes(First + g, pass + h) + j, sizeof pair);
            const __m256i weights = _mm256_set1_epi32(pair);
            Dot::add(a[g][h], first, weights);
            Dot::add(a[g][h + 1], next, weights);
          }
        }
      }
      for (int g = 0; g < S; ++g)
        for (int h = 0; h < H; ++h) rows.finish(First + g, pass + h, a[g][h]);
    }
    add_pairs<G, D, Dot, Source, First + S>(b, rows);
  }
}

// int8 rows: 16 codes of two rows interleaved byte by byte, then widened.
template <int D>
struct Int8Pairs {
  const std::int8_t* v;
  const std::int16_t (*codes_of_head)[16];
  const float* unit;  // per head
  float* acc;
  KVCACHE_AVX2 KVCACHE_INLINE void pairs(std::uint32_t j, int vector, __m256i& first,
                                         __m256i& next) const {
    const std::int8_t* row = v + std::size_t{j} * D + 8 * vector;
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row));
    const __m128i y = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + D));
    first = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(x, y));
    next = _mm256_cvtepi8_epi16(_mm_unpackhi_epi8(x, y));
  }
  const std::int16_t* codes(int g, int) const { return codes_of_head[g]; }
  KVCACHE_AVX2 KVCACHE_INLINE void finish(int g, int vector, __m256i sums) const {
    float* out = acc + g * D + 8 * vector;
    _mm256_storeu_ps(out, _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(unit[g]),
                                          _mm256_loadu_ps(out)));
  }
};

// The weights of the n present rows times their scales (zeros past n), for head g.
KVCACHE_AVX2 KVCACHE_INLINE void scaled_weights(const Block16& b, int g, const float* scales,
                                                __m256 out[2]) {
  for (int h = 0; h < 2; ++h)
    out[h] =
        _mm256_mul_ps(_mm256_load_ps(b.weight + kSpan * g + 8 * h), _mm256_load_ps(scales + 8 * h));
}

template <int G, int D, class Dot>
KVCACHE_AVX2 void values16_int8(const Block16& b) {
  alignas(32) float scales[16] = {};
  std::copy_n(static_cast<const float*>(b.v_meta), b.n, scales);
  alignas(32) std::int16_t codes[G][16];
  float unit[G];
  for (int g = 0; g < G; ++g) {
    __m256 w[2];
    scaled_weights(b, g, scales, w);
    unit[g] = store_codes(w, codes[g]);
  }
  add_pairs<G, D, Dot>(b, Int8Pairs<D>{static_cast<const std::int8_t*>(b.v), codes, unit, b.acc});
}

// int4 rows in groups of S elements: 8 bytes (16 elements, within a group) of two rows
// interleaved byte by byte, split into low nibbles (even elements) and high ones (odd), put back
// in element order by 16-bit unpacks, then widened.
template <int G, int D, int S>
struct Int4Pairs {
  static constexpr int Groups = D / S;
  const std::uint8_t* v;
  const std::int16_t (*codes_of)[Groups][16];
  const float (*unit)[Groups];
  const float (*minimum_sum)[Groups];
  float* acc;
  KVCACHE_AVX2 KVCACHE_INLINE void pairs(std::uint32_t j, int vector, __m256i& first,
                                         __m256i& next) const {
    const std::uint8_t* row = v + std::size_t{j} * D / 2 + 4 * vector;
    const __m128i both =
        _mm_unpacklo_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row)),
                          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + D / 2)));
    const __m128i nibble = _mm_set1_epi8(0x0F);
    const __m128i even = _mm_and_si128(both, nibble);
    const __m128i odd = _mm_and_si128(_mm_srli_epi16(both, 4), nibble);
    first = _mm256_cvtepu8_epi16(_mm_unpacklo_epi16(even, odd));
    next = _mm256_cvtepu8_epi16(_mm_unpackhi_epi16(even, odd));
  }
  const std::int16_t* codes(int g, int vector) const { return codes_of[g][vector * 8 / S]; }
  KVCACHE_AVX2 KVCACHE_INLINE void finish(int g, int vector, __m256i sums) const {
    const int group = vector * 8 / S;
    float* out = acc + g * D + 8 * vector;
    _mm256_storeu_ps(
        out, _mm256_add_ps(_mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(unit[g][group]),
                                           _mm256_loadu_ps(out)),
                           _mm256_set1_ps(minimum_sum[g][group])));
  }
};

// int4 values in groups of S elements: per (head, group) the weights times the group's scales,
// rounded against their largest; the minima times the weights make one sum per (head, group),
// added to the group's elements.
template <int G, int D, int S, class Dot>
KVCACHE_AVX2 void values16_int4(const Block16& b) {
  static_assert(D == 64 || D == 128);
  constexpr int Groups = D / S;
  GroupParams<Groups> params;
  load_group_params(b.v_meta, b.n, params);
  alignas(32) std::int16_t codes[G][Groups][16];
  float unit[G][Groups], minimum_sum[G][Groups];
  for (int g = 0; g < G; ++g)
    for (int i = 0; i < Groups; ++i) {
      __m256 w[2];
      scaled_weights(b, g, params.scale[i], w);
      unit[g][i] = store_codes(w, codes[g][i]);
      const __m256 terms = _mm256_add_ps(
          _mm256_mul_ps(_mm256_load_ps(b.weight + kSpan * g), _mm256_load_ps(params.minimum[i])),
          _mm256_mul_ps(_mm256_load_ps(b.weight + kSpan * g + 8),
                        _mm256_load_ps(params.minimum[i] + 8)));
      __m128 half = _mm_add_ps(_mm256_castps256_ps128(terms), _mm256_extractf128_ps(terms, 1));
      half = _mm_add_ps(half, _mm_movehl_ps(half, half));
      minimum_sum[g][i] = _mm_cvtss_f32(_mm_add_ss(half, _mm_movehdup_ps(half)));
    }
  add_pairs<G, D, Dot>(b, Int4Pairs<G, D, S>{static_cast<const std::uint8_t*>(b.v), codes, unit,
                                             minimum_sum, b.acc});
}

}  // namespace

ValuePass value_pass(std::uint32_t group, std::uint32_t dim, RowFormat values, bool vnni) {
  return for_shape<VectorIsa::avx2, ValuePass>(group, dim, [values, vnni]<int G, int D>() {
    return for_kind<D, ValuePass>(
        values, []<RowFormat R>() -> ValuePass { return &each_block<&values16<G, D, R>>; },
        vnni ? &each_block<&values16_int8<G, D, VnniDot>>
             : &each_block<&values16_int8<G, D, MaddDot>>,
        [vnni]<int S>() -> ValuePass {
          return vnni ? &each_block<&values16_int4<G, D, S, VnniDot>>
                      : &each_block<&values16_int4<G, D, S, MaddDot>>;
        });
  });
}

}  // namespace kvcache::cpu::avx2
