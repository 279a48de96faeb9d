// The AVX2 key passes: 16 keys against the G query heads of their KV head, to softmax weights.
// A pass takes T = 8 / G keys (rounded down: 2 for 3 heads, 1 for 5 to 8) against all G heads,
// so that its accumulators, at most 8, hold the (head, key) pairs (lane i of the sums: head
// i / T, key i % T; lanes from G x T on unused) and one lane-sum network finishes them. All heads
// in one pass, so that each key vector is converted once for all of them: with fp16 keys the
// conversions bound the passes (sweeps of 4, 2 and 1 heads, tried for groups 5 to 7, were slower
// at 7 and 8).
#include "kernels/avx2/vectors.hpp"

namespace kvcache::cpu::avx2 {
namespace {

// Lane i of `sums` to logits[i / T][first + i % T], for the G x T lanes in use.
template <int G>
KVCACHE_AVX2 KVCACHE_INLINE void scatter_pairs(__m256 sums, int first, float (*logits)[16]) {
  constexpr int T = 8 / G;
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sums);
  for (int i = 0; i < G * T; ++i) logits[i / T][first + i % T] = lanes[i];
}

// float32, fp16, bf16 or fp8 keys: each key vector is loaded (and converted) once for all
// heads; fp8 rows' scales multiply the logits.
template <int G, int D, RowFormat K>
KVCACHE_AVX2 void keys16(const Block16& b) {
  constexpr int T = 8 / G;
  alignas(32) float logits[G][16];
  for (int first = 0; first < 16; first += T) {
    prefetch_key_shares<16 / T>(b, first / T);
    __m256 s[8];
    for (int i = 0; i < 8; ++i) s[i] = _mm256_setzero_ps();
      // Unrolled, so that the accumulators stay in registers.
#pragma GCC unroll 16
    for (int c = 0; c < D / 8; ++c)
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const __m256 k = load_floats8<K>(b.k, static_cast<std::size_t>(first + t) * D + 8 * c);
        for (int g = 0; g < G; ++g)
          s[g * T + t] = _mm256_fmadd_ps(_mm256_loadu_ps(b.q + g * D + 8 * c), k, s[g * T + t]);
      }
    scatter_pairs<G>(sum_lanes8(s), first, logits);
  }
  if constexpr (K == RowFormat::fp8) {
    const auto* scales = static_cast<const float*>(b.k_meta);
    for (int g = 0; g < G; ++g)
      for (int h = 0; h < 2; ++h)
        _mm256_store_ps(logits[g] + 8 * h,
                        _mm256_mul_ps(_mm256_load_ps(logits[g] + 8 * h),
                                      _mm256_mul_ps(_mm256_loadu_ps(scales + 8 * h),
                                                    _mm256_set1_ps(kFp8Unit))));
  }
  for (int g = 0; g < G; ++g)
    softmax16<D>(logits[g], b.n, b.m[g], b.l + g * kLanes, b.acc + g * D, b.weight + kSpan * g);
}

// 16 codes of a key row widened to int16: int8 elements e..e+15; int4 (e a multiple of 16 in a
// part of 32) the part's even elements for its first half, its odd ones for the second, as
// BlockAttention::quantize orders the query.
template <RowFormat K>
KVCACHE_AVX2 KVCACHE_INLINE __m256i key_codes(const void* row, int e) {
  if constexpr (K == RowFormat::int8) {
    return _mm256_cvtepi8_epi16(_mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const std::int8_t*>(row) + e)));
  } else {
    static_assert(int4_group(K) != 0);
    const __m256i bytes = _mm256_cvtepu8_epi16(_mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const std::uint8_t*>(row) + e / 32 * 16)));
    return e % 32 == 0 ? _mm256_and_si256(bytes, _mm256_set1_epi16(0x0F))
                       : _mm256_srli_epi16(bytes, 4);
  }
}

// int8 or int4 keys against the quantized query: exact int16 dot products per part of 32
// elements, or per chunk of 64 whose parts share the query's step and the key's scale (int8, and
// int4 in groups of 64 or 128), turned into logits by the query's step and the key's scale (int8:
// one per row; int4: one per group, plus the group's minimum times step x the query codes' sum).
template <int G, int D, RowFormat K, class Dot>
KVCACHE_AVX2 void keys16_int(const Block16& b) {
  static_assert(D == 64 || D == 128);
  constexpr int T = 8 / G, Parts = D / 32, S = int4_group(K);
  constexpr int Span = S == 32 ? 1 : 2;  // parts per integer sum
  constexpr int RowBytes = K == RowFormat::int8 ? D : D / 2;
  const QuantizedQuery& q8 = *b.q8;
  const auto* keys = static_cast<const std::byte*>(b.k);
  GroupParams<S == 0 ? 1 : D / S> params;
  if constexpr (S != 0) load_group_params(b.k_meta, 16, params);
  alignas(32) float logits[G][16];
  for (int first = 0; first < 16; first += T) {
    prefetch_key_shares<16 / T>(b, first / T);
    __m256 sum = _mm256_setzero_ps();
    // Unrolled, so that the accumulators stay in registers.
#pragma GCC unroll 16
    for (int p = 0; p < Parts; p += Span) {
      __m256i s[8];
      for (int i = 0; i < 8; ++i) s[i] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const std::byte* row = keys + (first + t) * RowBytes;
#pragma GCC unroll 4
        for (int e = 32 * p; e < 32 * (p + Span); e += 16) {
          const __m256i k = key_codes<K>(row, e);
          for (int g = 0; g < G; ++g)
            Dot::add(s[g * T + t], k,
                     _mm256_loadu_si256(
                         reinterpret_cast<const __m256i*>(q8.wide_codes.data() + g * D + e)));
        }
      }
      const __m256 dots = _mm256_cvtepi32_ps(sum_lanes8(s));
      const __m256 steps = _mm256_loadu_ps(q8.pair_steps.data() + 8 * p);
      if constexpr (K == RowFormat::int8) {
        sum = _mm256_fmadd_ps(dots, steps, sum);
      } else {
        const int group = p * 32 / S;
        __m256 code_sums = _mm256_loadu_ps(q8.pair_sums.data() + 8 * p);
        if constexpr (Span == 2)
          code_sums = _mm256_add_ps(code_sums, _mm256_loadu_ps(q8.pair_sums.data() + 8 * p + 8));
        sum = _mm256_fmadd_ps(dots, _mm256_mul_ps(steps, per_key<T>(params.scale[group] + first)),
                              sum);
        sum = _mm256_fmadd_ps(per_key<T>(params.minimum[group] + first), code_sums, sum);
      }
    }
    if constexpr (K == RowFormat::int8)
      sum = _mm256_mul_ps(sum, per_key<T>(static_cast<const float*>(b.k_meta) + first));
    scatter_pairs<G>(sum, first, logits);
  }
  for (int g = 0; g < G; ++g)
    softmax16<D>(logits[g], b.n, b.m[g], b.l + g * kLanes, b.acc + g * D, b.weight + kSpan * g);
}

}  // namespace

Pass16 key_pass(std::uint32_t group, std::uint32_t dim, RowFormat keys, bool vnni) {
  return for_shape<VectorIsa::avx2>(group, dim, [keys, vnni]<int G, int D>() {
    return for_kind<D>(
        keys, []<RowFormat R>() -> Pass16 { return &keys16<G, D, R>; },
        vnni ? &keys16_int<G, D, RowFormat::int8, VnniDot>
             : &keys16_int<G, D, RowFormat::int8, MaddDot>,
        [vnni]<int S>() -> Pass16 {
          constexpr RowFormat K = int4_rows(S);
          return vnni ? &keys16_int<G, D, K, VnniDot> : &keys16_int<G, D, K, MaddDot>;
        });
  });
}

}  // namespace kvcache::cpu::avx2
