// The key passes: 16 keys against the G query heads of their KV head, to softmax weights.
#include "vectors.hpp"

namespace kvcache::cpu::avx512 {
namespace {

KVCACHE_KERNELS_BEGIN

// A block of 16 float32, fp16, bf16 or fp8 keys for G query heads of dimension D, everything in
// registers: each key vector is loaded (and converted) once for all heads, 16 / G keys at a
// time so that 16 accumulators hold (head, key) pairs; one shuffle-reduction per 16 / G keys,
// its sums scattered to their head's logits (times the row scales for fp8), then the softmax.
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
        __m512 qc = _mm512_loadu_ps(b.q + g * D + 16 * c);
        // Loaded once for the T keys: GCC would fold the load into each FMA instead, and the
        // loads (two per cycle) would then limit the pass.
        asm("" : "+v"(qc));
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

KVCACHE_KERNELS_END

}  // namespace

Pass16 key_pass(std::uint32_t group, std::uint32_t dim, Rows keys) {
  return for_shape(group, dim, [keys]<int G, int D>() {
    return for_kind(
        keys, []<Rows R>() -> Pass16 { return &keys16<G, D, R>; }, &keys16_int8<G, D>,
        &keys16_int4<G, D>);
  });
}

}  // namespace kvcache::cpu::avx512
