// The key passes: 16 keys against the G query heads of their KV head, to softmax weights.
#include "kernels/avx512/vectors.hpp"

namespace kvcache::cpu::avx512 {
namespace {

KVCACHE_KERNELS_BEGIN

// A block of 16 float32, fp16, bf16 or fp8 keys for G query heads of dimension D, everything in
// registers: each key vector is loaded (and converted) once for all heads, 16 / G keys at a
// time so that 16 accumulators hold (head, key) pairs; one shuffle-reduction per 16 / G keys,
// its sums scattered to their head's logits (times the row scales for fp8), then the softmax.
template <int G, int D, RowFormat K>
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
      K == RowFormat::fp8 ? _mm512_mul_ps(_mm512_loadu_ps(static_cast<const float*>(b.k_meta)),
                                          _mm512_set1_ps(kFp8Unit))
                          : _mm512_set1_ps(1.0f);
  for (int g = 0; g < G; ++g)
    softmax16<D>(_mm512_mul_ps(_mm512_load_ps(logits[g]), row_scales), b.n, b.m[g],
                 b.l + g * kLanes, b.acc + g * D, b.weight + kSpan * g, b.earlier);
}

// Integer keys meet the quantized query with their rows transposed (transpose_rows): lane t of
// column c holds token t's bytes 4c..4c + 3, and vpdpbusd against four of the query's codes,
// broadcast, adds to token t's dot product in lane t, so the logits come out in token order
// with no horizontal sums.

// 128-bit lane L of out[q] = 128-bit lane q of in[L].
KVCACHE_AVX512 KVCACHE_INLINE void transpose_lanes(const __m512i in[4], __m512i out[4]) {
  const __m512i p0 = _mm512_shuffle_i32x4(in[0], in[1], 0x44);
  const __m512i p1 = _mm512_shuffle_i32x4(in[0], in[1], 0xEE);
  const __m512i p2 = _mm512_shuffle_i32x4(in[2], in[3], 0x44);
  const __m512i p3 = _mm512_shuffle_i32x4(in[2], in[3], 0xEE);
  out[0] = _mm512_shuffle_i32x4(p0, p2, 0x88);
  out[1] = _mm512_shuffle_i32x4(p0, p2, 0xDD);
  out[2] = _mm512_shuffle_i32x4(p1, p3, 0x88);
  out[3] = _mm512_shuffle_i32x4(p1, p3, 0xDD);
}

// A row of Dwords (8 or 16) 32-bit words, zeros past them.
template <int Dwords>
KVCACHE_AVX512 KVCACHE_INLINE __m512i load_row(const std::byte* row) {
  if constexpr (Dwords == 16) return _mm512_loadu_si512(row);
  return _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row)));
}

// 16 rows of Dwords (8 or 16) 32-bit words, `stride` bytes apart, transposed: lane t of
// column[c] is word c of row t. Four rounds of 16 shuffles: pairs of rows interleaved by words,
// then by pairs of words, then 128-bit lanes transposed.
template <int Dwords>
KVCACHE_AVX512 KVCACHE_INLINE void transpose_rows(const std::byte* rows, std::size_t stride,
                                                  __m512i column[Dwords]) {
  // Rows are loaded where they are used (held all at once, they are spilled to the stack).
  __m512i a[16], b[16];
  for (int i = 0; i < 16; i += 2) {
    const __m512i even = load_row<Dwords>(rows + i * stride),
                  odd = load_row<Dwords>(rows + (i + 1) * stride);
    a[i] = _mm512_unpacklo_epi32(even, odd);
    a[i + 1] = _mm512_unpackhi_epi32(even, odd);
  }
  // b[4j + m], 128-bit lane l: word 4l + m of rows 4j..4j + 3.
  for (int j = 0; j < 16; j += 4) {
    b[j] = _mm512_unpacklo_epi64(a[j], a[j + 2]);
    b[j + 1] = _mm512_unpackhi_epi64(a[j], a[j + 2]);
    b[j + 2] = _mm512_unpacklo_epi64(a[j + 1], a[j + 3]);
    b[j + 3] = _mm512_unpackhi_epi64(a[j + 1], a[j + 3]);
  }
  for (int m = 0; m < 4; ++m) {
    const __m512i quads[4] = {b[m], b[4 + m], b[8 + m], b[12 + m]};
    __m512i out[4];
    transpose_lanes(quads, out);
    for (int l = 0; l < Dwords / 4; ++l) column[4 * l + m] = out[l];
  }
}

// acc + the products of a's unsigned bytes and the four signed bytes at `codes` (in every lane),
// summed per 32-bit lane (vpdpbusd with an embedded broadcast). Inline assembly, and the
// accumulator by value, for the reasons given at the value passes' dpwssd.
KVCACHE_AVX512 KVCACHE_INLINE __m512i dpbusd_broadcast(__m512i acc, __m512i a,
                                                       const std::int8_t* codes) {
  asm("vpdpbusd %2%{1to16%}, %1, %0"
      : "+v"(acc)
      : "v"(a), "m"(*reinterpret_cast<const AliasedWord*>(codes)));
  return acc;
}

// 16 int8 keys: vpdpbusd multiplies unsigned by signed bytes, so the key codes are flipped to
// unsigned (k + 128, an xor) and 128 x the query's codes taken off per part of 32 elements; the
// part's step turns the exact integer sums into the logits, which the rows' scales multiply.
template <int G, int D, bool RowsToL1>
KVCACHE_VNNI void keys16_int8(const Block16& b) {
  static_assert(D == 64 || D == 128);
  constexpr int Parts = D / 32;
  const auto* k = static_cast<const std::byte*>(b.k);
  const QuantizedQuery& q8 = *b.q8;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 logits[G];
  for (int g = 0; g < G; ++g) logits[g] = _mm512_setzero_ps();
  // The transpositions sweep the rows' halves one after the other, 64 of every D bytes: where
  // it pays (see prefetch_rows_into_l1), the block's lines are asked for into L1 first, so that
  // the second sweep's do not wait.
  if constexpr (RowsToL1)
    for (int line = 0; line < D / 4; ++line)
      _mm_prefetch(reinterpret_cast<const char*>(k) + 64 * line, _MM_HINT_T0);
#pragma GCC unroll 2
  for (int half = 0; half < D / 64; ++half) {  // 64 bytes of each row: 16 columns, parts 2h, 2h+1
    prefetch_key_shares<D / 64>(b, half);
    __m512i column[16];
    transpose_rows<16>(k + 64 * half, D, column);
    for (int c = 0; c < 16; ++c) column[c] = _mm512_xor_si512(column[c], flip);
    for (int part = 2 * half; part < 2 * half + 2; ++part)
      for (int g = 0; g < G; ++g) {
        const std::int8_t* codes = q8.codes.data() + g * D + 32 * part;
        __m512i dot[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
        for (int c = 0; c < 8; ++c)
          dot[c % 2] = dpbusd_broadcast(dot[c % 2], column[8 * (part % 2) + c], codes + 4 * c);
        logits[g] = _mm512_add_ps(
            logits[g], _mm512_fmsub_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(dot[0], dot[1])),
                                       _mm512_set1_ps(q8.part_steps[g * Parts + part]),
                                       _mm512_set1_ps(q8.part_sums[g * Parts + part])));
      }
  }
  const __m512 row_scales = _mm512_loadu_ps(static_cast<const float*>(b.k_meta));  // 16, padded
  for (int g = 0; g < G; ++g) logits[g] = _mm512_mul_ps(logits[g], row_scales);
  softmax16_heads<G, D>(logits, b);
}

// 16 int4 keys (D of 64 or 128) in groups of S = 32, 64 or 128 elements: column c's low nibbles
// are elements 8c, 8c + 2, 8c + 4, 8c + 6 and its high nibbles the odd ones after them, against
// the query's even and odd codes. Two ands take the nibbles apart: the high ones stay in place
// (vpdpbusd reads them as unsigned bytes, 16 times the codes), so the odd sums, multiples of 16,
// are shifted down by 4 (exactly) to join the even ones, once per head and unit instead of a
// shift or a GF(2) affine transform per column (which would take a pipe the dot products need). The
// integer sums run over units of 32 elements (S = 32) or 64 (a query chunk, whose step they share,
// inside one group); per (head, unit) the sum times the group's scale and the chunk's step, plus
// the group's minimum times step x the query codes' sum.
template <int G, int D, int S>
KVCACHE_VNNI void keys16_int4(const Block16& b) {
  static_assert(D == 64 || D == 128);
  static_assert(S == 32 || S == 64 || S == 128);
  constexpr int Parts = D / 32, Unit = S == 32 ? 1 : 2;  // parts of 32 elements per sum
  const QuantizedQuery& q8 = *b.q8;
  const GroupParams<D / S> params = group_params<D / S>(b.k_meta);
  __m512i column[D / 8];
  transpose_rows<D / 8>(static_cast<const std::byte*>(b.k), D / 2, column);
  const __m512i high = _mm512_set1_epi8(static_cast<char>(0xF0));
  __m512 logits[G];
  for (int g = 0; g < G; ++g) logits[g] = _mm512_setzero_ps();
#pragma GCC unroll 4
  for (int first = 0; first < Parts; first += Unit) {
    const int group = first * 32 / S;
    prefetch_key_shares<Parts / Unit, kShares>(b, first / Unit);
    __m512i even[4 * Unit], odd[4 * Unit];
    for (int c = 0; c < 4 * Unit; ++c) {
      even[c] = _mm512_andnot_si512(high, column[4 * first + c]);
      odd[c] = _mm512_and_si512(column[4 * first + c], high);
    }
    for (int g = 0; g < G; ++g) {
      const std::int8_t* codes = q8.codes.data() + g * D + 16 * first;
      // A sum of the even and one of the odd elements per part of 32: chains of four vpdpbusd
      // (with one of each per unit of 64, chains of eight, the pass waited on their latency).
      __m512i dot[2 * Unit];
      for (int i = 0; i < 2 * Unit; ++i) dot[i] = _mm512_setzero_si512();
      for (int c = 0; c < 4 * Unit; ++c) {
        dot[c / 4 * 2] = dpbusd_broadcast(dot[c / 4 * 2], even[c], codes + 4 * c);
        dot[c / 4 * 2 + 1] = dpbusd_broadcast(dot[c / 4 * 2 + 1], odd[c], codes + D / 2 + 4 * c);
      }
      __m512i dot_even = dot[0], dot_odd = dot[1];
      if constexpr (Unit == 2) {
        dot_even = _mm512_add_epi32(dot_even, dot[2]);
        dot_odd = _mm512_add_epi32(dot_odd, dot[3]);
      }
      dot_odd = _mm512_srai_epi32(dot_odd, 4);
      const float step = q8.part_steps[g * Parts + first];
      float sum = q8.part_sums[g * Parts + first];
      if constexpr (Unit == 2) sum += q8.part_sums[g * Parts + first + 1];
      logits[g] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(dot_even, dot_odd)),
                          _mm512_mul_ps(params.scale[group], _mm512_set1_ps(step)),
                          _mm512_fmadd_ps(params.minimum[group], _mm512_set1_ps(sum), logits[g]));
    }
  }
  softmax16_heads<G, D>(logits, b);
}

KVCACHE_KERNELS_END

}  // namespace

Pass16 key_pass(std::uint32_t group, std::uint32_t dim, RowFormat keys) {
  const bool rows_to_l1 = prefetch_rows_into_l1();
  return for_shape<VectorIsa::avx512>(group, dim, [keys, rows_to_l1]<int G, int D>() {
    return for_kind<D>(
        keys, []<RowFormat R>() -> Pass16 { return &keys16<G, D, R>; },
        rows_to_l1 ? &keys16_int8<G, D, true> : &keys16_int8<G, D, false>,
        []<int S>() -> Pass16 { return &keys16_int4<G, D, S>; });
  });
}

}  // namespace kvcache::cpu::avx512
