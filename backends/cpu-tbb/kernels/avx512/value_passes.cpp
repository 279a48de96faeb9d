// The value passes: the weights of a block of 16 times its values, into the accumulators.
#include "kernels/avx512/vectors.hpp"

namespace kvcache::cpu::avx512 {
namespace {

KVCACHE_KERNELS_BEGIN

// Adds the first n float32, fp16, bf16 or fp8 value rows times their weights, over parts of D so
// that all accumulators stay in registers.
template <int G, int D, RowFormat V>
KVCACHE_AVX512 void values16(const Block16& b) {
  constexpr int C = D / 16;                   // vectors per row
  constexpr int H = C < 16 / G ? C : 16 / G;  // vectors per pass over the values
  // fp8 rows' scales multiply their weights.
  alignas(64) float scaled[V == RowFormat::fp8 ? G : 1][16];
  const float* weight = b.weight;
  std::size_t row = kSpan;  // floats from one head's weights to the next's
  if constexpr (V == RowFormat::fp8) {
    const __m512 scales =
        _mm512_mul_ps(_mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << b.n) - 1), b.v_meta),
                      _mm512_set1_ps(kFp8Unit));
    for (int g = 0; g < G; ++g)
      _mm512_store_ps(scaled[g], _mm512_mul_ps(_mm512_load_ps(b.weight + kSpan * g), scales));
    weight = &scaled[0][0];
    row = 16;
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
        const __m512 w = _mm512_set1_ps(weight[g * row + j]);
        for (int h = 0; h < H; ++h) a[g][h] = _mm512_fmadd_ps(w, vj[h], a[g][h]);
      }
    }
    for (int g = 0; g < G; ++g)
      for (int h = 0; h < H; ++h) _mm512_storeu_ps(b.acc + g * D + 16 * (pass + h), a[g][h]);
  }
}

// Quantized values meet their weights in integer dot products (see kLargestCode), two tokens at
// a time (vpdpwssd: int16 pairs into int32). A byte permute (vpermb) makes the pairs: from 32
// bytes of rows j and j + 1, lane i gets byte i of both rows in its two words, so no widening and
// no word permutes (two uops each) are needed.

// Rounds 16 weights already scaled to at most kLargestCode to int16 codes (the narrowing
// saturates, for the hair by which the reciprocal may pass it).
KVCACHE_AVX512 KVCACHE_INLINE void store_codes(__m512 scaled, std::int16_t* codes) {
  _mm256_store_si256(reinterpret_cast<__m256i*>(codes),
                     _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(scaled)));
}

// acc + a's int16 pairs times w's (vpdpwssd; the weights are broadcast once and used for every
// chunk of the rows). In inline assembly because GCC 12 copies an accumulator updated by the
// intrinsic in a loop to another register and back at every step; by value, because with the
// accumulator passed by reference GCC kept the 16 sums of the int4 pass for groups of 8 on the
// stack, a load and a store around every vpdpwssd.
KVCACHE_AVX512 KVCACHE_INLINE __m512i dpwssd(__m512i acc, __m512i a, __m512i w) {
  asm("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(w));
  return acc;
}

// Bytes [offset, offset + 32) of rows j and j + 1, Stride bytes apart: [row j][row j + 1].
template <std::size_t Stride>
KVCACHE_AVX512 KVCACHE_INLINE __m512i row_pair_bytes(const std::byte* rows, std::uint32_t j,
                                                     std::size_t offset) {
  const std::byte* row = rows + std::size_t{j} * Stride + offset;
  if constexpr (Stride == 32) return _mm512_loadu_si512(row);  // adjacent rows
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + Stride)), 1);
}

// int8 rows: vpermb indices over [row j][row j + 1] that put code i (half 0: codes 0..15, half
// 1: 16..31) of both rows in the high bytes of lane i's two words; an arithmetic shift then
// sign-extends them.
struct CodeWords {
  alignas(64) std::int8_t index[2][64];
  constexpr CodeWords() : index{} {
    for (int half = 0; half < 2; ++half)
      for (int i = 0; i < 16; ++i) {
        index[half][4 * i + 1] = static_cast<std::int8_t>(16 * half + i);
        index[half][4 * i + 3] = static_cast<std::int8_t>(32 + 16 * half + i);
      }
  }
};
inline constexpr CodeWords kCodeWords;
inline constexpr __mmask64 kHighBytes = 0xAAAAAAAAAAAAAAAA;

// int8 values, the blocks of a span (up to kInt8SpanBlocks) at once: per head, the weights times
// the row scales rounded against their largest in the span (see kLargestCode); H vectors of the
// rows per pass so that the G x H int32 sums stay in registers.
template <int G, int D>
KVCACHE_VBMI void values_int8(const Block16* blocks, std::uint32_t count) {
  alignas(64) std::int16_t codes[G][16 * kInt8SpanBlocks];
  float unit[G];
  __m512 scales[kInt8SpanBlocks];
  for (std::uint32_t k = 0; k < count; ++k)
    scales[k] =
        _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << blocks[k].n) - 1), blocks[k].v_meta);
  for (int g = 0; g < G; ++g) {
    __m512 w[kInt8SpanBlocks];
    __m512 top = w[0] = _mm512_mul_ps(_mm512_load_ps(blocks[0].weight + kSpan * g), scales[0]);
    for (std::uint32_t k = 1; k < count; ++k)
      top = _mm512_max_ps(
          top, w[k] = _mm512_mul_ps(_mm512_load_ps(blocks[k].weight + kSpan * g), scales[k]));
    top = broadcast_max(top);
    const __m512 factor = _mm512_mul_ps(reciprocal(top), _mm512_set1_ps(kLargestCode));
    for (std::uint32_t k = 0; k < count; ++k)
      store_codes(_mm512_mul_ps(w[k], factor), codes[g] + 16 * k);
    unit[g] = _mm512_cvtss_f32(top) / kLargestCode;
  }
  constexpr int C = D / 16;
  constexpr int H = C < 16 / G ? C : 16 / G;  // vectors per pass, even
  const __m512i index[2] = {_mm512_load_si512(kCodeWords.index[0]),
                            _mm512_load_si512(kCodeWords.index[1])};
  for (int pass = 0; pass < C; pass += H) {
    __m512i a[G][H];
    for (int g = 0; g < G; ++g)
      for (int h = 0; h < H; ++h) a[g][h] = _mm512_setzero_si512();
    for (std::uint32_t k = 0; k < count; ++k) {
      const Block16& b = blocks[k];
      const auto* v = static_cast<const std::byte*>(b.v);
      for (std::uint32_t j = 0; j < b.n; j += 2) {
        if (pass == 0) prefetch_shares(b, kShares / 2 + j, 2);
        __m512i pair[G];  // each head's weights of rows j, j + 1, broadcast once for the pass
        for (int g = 0; g < G; ++g)
          pair[g] = _mm512_set1_epi32(*reinterpret_cast<const AliasedWord*>(codes[g] + 16 * k + j));
        for (int h = 0; h < H; h += 2) {
          const __m512i bytes = row_pair_bytes<D>(v, j, 16 * (pass + h));
          for (int half = 0; half < 2; ++half) {
            const __m512i words =
                _mm512_srai_epi16(_mm512_maskz_permutexvar_epi8(kHighBytes, index[half], bytes), 8);
            for (int g = 0; g < G; ++g) a[g][h + half] = dpwssd(a[g][h + half], words, pair[g]);
          }
        }
      }
    }
    float* acc = blocks[0].acc;
    for (int g = 0; g < G; ++g)
      for (int h = 0; h < H; ++h) {
        float* out = acc + g * D + 16 * (pass + h);
        _mm512_storeu_ps(out, _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[g][h]), _mm512_set1_ps(unit[g]),
                                              _mm512_loadu_ps(out)));
      }
  }
}

// int4 rows, four at a time: vpermb indices over [row j: chunks 2p, 2p + 1][row j + 1: the same]
// (16 bytes per chunk; index[s] for chunk 2p + s) that put byte order(i) of the chunk of both
// rows in bytes 0 and 1 of lane i; the same indices, merged into bytes 2 and 3 from rows j + 2
// and j + 3, complete the lane's four rows for vpdpbusd. The low nibbles (the chunk's even
// elements) and the high ones (odd elements) are then taken apart by centered_codes. order is
// chosen so that interleaving the lanes of the even and odd sums (unpacklo/hi_epi32) gives the
// chunk's elements 0..15 and 16..31 in order.
struct NibbleQuads {
  alignas(64) std::int8_t index[2][64];
  constexpr NibbleQuads() : index{} {
    for (int s = 0; s < 2; ++s)
      for (int i = 0; i < 16; ++i) {
        const int quarter = i / 4, r = i % 4;
        const int order = r < 2 ? 2 * quarter + r : 8 + 2 * quarter + r - 2;
        index[s][4 * i] = index[s][4 * i + 2] = static_cast<std::int8_t>(16 * s + order);
        index[s][4 * i + 1] = index[s][4 * i + 3] = static_cast<std::int8_t>(32 + 16 * s + order);
      }
  }
};
inline constexpr NibbleQuads kNibbleQuads;
inline constexpr __mmask64 kUpperWordBytes = 0xCCCCCCCCCCCCCCCC;

// The high nibble c of each byte of x as the signed byte 16 (c - 8): kept in place (an and and
// an xor in one ternary-logic instruction), so that no shift or GF(2) affine transform (which
// would take a pipe the dot products need) moves it down. The low nibbles go through it shifted
// up by 4 (a word shift: what moves into the next byte is masked off).
KVCACHE_AVX512 KVCACHE_INLINE __m512i centered_codes(__m512i x) {
  constexpr int kAndXor = (0xF0 & 0xCC) ^ 0xAA;  // (a & b) ^ c
  return _mm512_ternarylogic_epi32(x, _mm512_set1_epi8(static_cast<char>(0xF0)),
                                   _mm512_set1_epi8(static_cast<char>(0x80)), kAndXor);
}
// What centered_codes' sums are short of: they count 16 times the codes.
inline constexpr float kCenteredUnit = 1.0f / 16.0f;

// acc + the products of w's unsigned bytes and a's signed ones, four per 32-bit lane
// (vpdpbusd); inline assembly and by value for the reasons given at dpwssd.
KVCACHE_AVX512 KVCACHE_INLINE __m512i dpbusd(__m512i acc, __m512i w, __m512i a) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(a));
  return acc;
}

// The byte weights are made in int16 words: a head's weights at most kWeightWord (its largest),
// a group's scales at most kScaleWord (its largest: kLargestByteWeight x 128), their product
// rounded to 1/128 by vpmulhrsw (which rounds) and that to an integer: off by at most 1/2 + 1/50
// of kLargestByteWeight x w / (largest w) x scale / (largest scale) (see kLargestByteWeight).
// Converting the weights per head and the scales per group, and multiplying words, instead of
// products in floats per (head, group): fewer instructions on the pipe of the dot products.
inline constexpr float kWeightWord = 32767.0f, kScaleWord = 128.0f * kLargestByteWeight;

// Blocks blocks' 16 floats each (up to 4; zeros for the rest) times `factor`, rounded to int16,
// as two packs leave them: 128-bit lane L of words[p] holds rows 4L..4L + 3 of block 2p, then of
// block 2p + 1.
template <std::uint32_t Blocks>
KVCACHE_AVX512 KVCACHE_INLINE void to_words(const __m512* x, __m512 factor, __m512i words[2]) {
  static_assert(kSpanBlocks == 4 && Blocks <= kSpanBlocks);
  for (std::uint32_t pack = 0; pack < 2; ++pack) {
    __m512i half[2];
    for (std::uint32_t h = 0; h < 2; ++h)
      half[h] = 2 * pack + h < Blocks ? _mm512_cvtps_epi32(_mm512_mul_ps(x[2 * pack + h], factor))
                                      : _mm512_setzero_si512();
    words[pack] = _mm512_packs_epi32(half[0], half[1]);
  }
}

// The byte weights of a span's blocks from its weight and scale words (to_words): the four
// weights of rows j..j + 3 (j a multiple of 4) of block k at byte 4 x (j + k).
KVCACHE_AVX512 KVCACHE_INLINE __m512i byte_weights(const __m512i weight[2],
                                                   const __m512i scale[2]) {
  const __m512i to_integer = _mm512_set1_epi16(256);  // x 256 / 2^15, rounded: / 128
  __m512i product[2];
  for (int pack = 0; pack < 2; ++pack)
    product[pack] = _mm512_mulhrs_epi16(_mm512_mulhrs_epi16(weight[pack], scale[pack]), to_integer);
  return _mm512_packus_epi16(product[0], product[1]);
}

// values_int4_span's weights of a span: per (head, group) the weights times the group's scales
// rounded to bytes, the unit a byte stands for, and the sum the minima and the codes' middle add.
template <int G, int D, int S, std::uint32_t Blocks>
KVCACHE_VBMI __attribute__((always_inline)) inline void span_byte_weights(
    const Block16* blocks, const GroupParams<D / S> (&params)[Blocks],
    std::uint8_t (&weights)[G][D / S][kSpan], float (&unit)[G][D / S],
    float (&minimum_sum)[(G * (D / S) + 15) / 16 * 16]) {
  constexpr int Groups = D / S;
  // Per group its scales as words (relative to its largest) and unit's factor: the largest
  // scale / kLargestByteWeight, over 16 for centered_codes.
  __m512i scale_words[Groups][2];
  __m512 top_step[Groups];
  for (int i = 0; i < Groups; ++i) {
    __m512 scale[Blocks], top = scale[0] = params[0].scale[i];
    for (std::uint32_t k = 1; k < Blocks; ++k)
      top = _mm512_max_ps(top, scale[k] = params[k].scale[i]);
    top = broadcast_max(top);
    to_words<Blocks>(scale, _mm512_mul_ps(reciprocal(top), _mm512_set1_ps(kScaleWord)),
                     scale_words[i]);
    top_step[i] = _mm512_mul_ps(top, _mm512_set1_ps(kCenteredUnit / kLargestByteWeight));
  }
  // What code 8 stands for.
  __m512 middle[Blocks][Groups];
  for (std::uint32_t k = 0; k < Blocks; ++k)
    for (int i = 0; i < Groups; ++i)
      middle[k][i] =
          _mm512_fmadd_ps(params[k].scale[i], _mm512_set1_ps(8.0f), params[k].minimum[i]);
  __m512 terms[(G * Groups + 15) / 16 * 16];
  for (int g = 0; g < G; ++g) {
    __m512 w[Blocks];
    __m512 top = w[0] = _mm512_load_ps(blocks[0].weight + kSpan * g);
    for (std::uint32_t k = 1; k < Blocks; ++k)
      top = _mm512_max_ps(top, w[k] = _mm512_load_ps(blocks[k].weight + kSpan * g));
    top = broadcast_max(top);
    __m512i weight_words[2];
    to_words<Blocks>(w, _mm512_mul_ps(reciprocal(top), _mm512_set1_ps(kWeightWord)), weight_words);
    for (int i = 0; i < Groups; ++i) {
      __m512 sum = _mm512_setzero_ps();
      for (std::uint32_t k = 0; k < Blocks; ++k) sum = _mm512_fmadd_ps(w[k], middle[k][i], sum);
      _mm512_store_si512(weights[g][i], byte_weights(weight_words, scale_words[i]));
      unit[g][i] = _mm512_cvtss_f32(_mm512_mul_ps(top, top_step[i]));
      terms[g * Groups + i] = sum;
    }
  }
  if constexpr (G * Groups < 16) {  // fewer sums than a network's 16: one by one
    for (int i = 0; i < G * Groups; ++i) minimum_sum[i] = _mm512_reduce_add_ps(terms[i]);
  } else {
    const __m512i lane_of_slot = _mm512_load_si512(sum_order().lane_of_slot);
    for (int i = 0; i < G * Groups; i += 16)
      _mm512_store_ps(minimum_sum + i,
                      _mm512_permutexvar_ps(lane_of_slot, sum_lanes16<AddFloats>(terms + i)));
  }
}

// int4 values in groups of S = 32, 64 or 128 elements, the blocks of a span at once, in integer
// dot products of byte weights and four rows' codes (vpdpbusd). Per (head, group) the weights
// times the group's scales are rounded to bytes against the head's largest weight times the
// group's largest scale in the span (see kLargestByteWeight); the codes count from the middle
// of their range (code - 8, centered_codes), so the rounding errs around zero instead of
// losing the weights rounded away: the minima and 8 x the scales times the weights make one sum
// per (head, group), added to the group's elements. The rows go
// through in chunks of 32 elements (two byte permutes per four rows), in passes small enough
// that each (head, chunk)'s even and odd sums stay in registers. Takes Blocks blocks, a whole
// span or one (BlockAttention::flush pads a last span of more with empty blocks), so that the
// loops over them have fixed trip counts.
template <int G, int D, int S, std::uint32_t Blocks>
KVCACHE_VBMI void values_int4_span(const Block16* blocks) {
  static_assert(D == 64 || D == 128);
  constexpr int Groups = D / S, Chunks = D / 32;
  constexpr int P = Chunks < 8 / G ? Chunks : 8 / G;  // chunks per pass: 2 x G x P sums
  GroupParams<Groups> params[Blocks];
  for (std::uint32_t k = 0; k < Blocks; ++k) params[k] = group_params<Groups>(blocks[k].v_meta);
  alignas(64) std::uint8_t weights[G][Groups][kSpan];
  float unit[G][Groups];
  alignas(64) float minimum_sum[(G * Groups + 15) / 16 * 16];
  span_byte_weights<G, D, S, Blocks>(blocks, params, weights, unit, minimum_sum);
  const __m512i index[2] = {_mm512_load_si512(kNibbleQuads.index[0]),
                            _mm512_load_si512(kNibbleQuads.index[1])};
  // Unrolled, so that each weight quad's place is a constant distance from `quads`.
#pragma GCC unroll 4
  for (int first = 0; first < Chunks; first += P) {
    __m512i even[G][P], odd[G][P];
    for (int g = 0; g < G; ++g)
      for (int i = 0; i < P; ++i) even[g][i] = odd[g][i] = _mm512_setzero_si512();
    for (std::uint32_t k = 0; k < Blocks; ++k) {
      const Block16& b = blocks[k];
      const auto* v = static_cast<const std::byte*>(b.v);
      for (std::uint32_t j = 0; j < b.n; j += 4) {
        // The byte weights of rows j..j + 3 for head g's group: at a fixed distance from here.
        const std::uint8_t* quads = &weights[0][0][0] + 4 * (j + k);
        __m512i front, back;
        for (int i = 0; i < P; ++i) {
          const int chunk = first + i, group = chunk * 32 / S;
          if (i == 0 || chunk % 2 == 0) {
            front = row_pair_bytes<D / 2>(v, j, 16 * (chunk - chunk % 2));
            back = row_pair_bytes<D / 2>(v, j + 2, 16 * (chunk - chunk % 2));
          }
          const __m512i bytes =
              _mm512_mask_permutexvar_epi8(_mm512_permutexvar_epi8(index[chunk % 2], front),
                                           kUpperWordBytes, index[chunk % 2], back);
          const __m512i low = centered_codes(_mm512_slli_epi16(bytes, 4));
          const __m512i high = centered_codes(bytes);
          for (int g = 0; g < G; ++g) {
            // One broadcast for both halves (and for the chunks of a group).
            const __m512i quad = _mm512_set1_epi32(
                *reinterpret_cast<const AliasedWord*>(quads + (g * Groups + group) * kSpan));
            even[g][i] = dpbusd(even[g][i], quad, low);
            odd[g][i] = dpbusd(odd[g][i], quad, high);
          }
        }
      }
    }
    for (int g = 0; g < G; ++g)
      for (int i = 0; i < P; ++i) {
        const int chunk = first + i, group = chunk * 32 / S;
        float* out = blocks[0].acc + g * D + 32 * chunk;
        const __m512 step = _mm512_set1_ps(unit[g][group]);
        const __m512 minimum = _mm512_set1_ps(minimum_sum[g * Groups + group]);
        const __m512i halves[2] = {_mm512_unpacklo_epi32(even[g][i], odd[g][i]),
                                   _mm512_unpackhi_epi32(even[g][i], odd[g][i])};
        for (int h = 0; h < 2; ++h)
          _mm512_storeu_ps(out + 16 * h,
                           _mm512_add_ps(_mm512_fmadd_ps(_mm512_cvtepi32_ps(halves[h]), step,
                                                         _mm512_loadu_ps(out + 16 * h)),
                                         minimum));
      }
  }
}

// A span's blocks, or a lone block (a call of up to 16 tokens: the padding's three empty blocks
// cost it most of its setup).
template <int G, int D, int S>
KVCACHE_VBMI void values_int4(const Block16* blocks, std::uint32_t count) {
  if (count == 1)
    values_int4_span<G, D, S, 1>(blocks);
  else
    values_int4_span<G, D, S, kSpanBlocks>(blocks);
}

KVCACHE_KERNELS_END

}  // namespace

ValuePass value_pass(std::uint32_t group, std::uint32_t dim, RowFormat values) {
  // Without byte permutes, int8 and int4 values are decoded to float32.
  const bool vbmi = has_vbmi();
  return for_shape<VectorIsa::avx512, ValuePass>(group, dim, [values, vbmi]<int G, int D>() {
    return for_kind<D, ValuePass>(
        values, []<RowFormat R>() -> ValuePass { return &each_block<&values16<G, D, R>>; },
        vbmi ? &values_int8<G, D> : nullptr,
        [vbmi]<int S>() -> ValuePass { return vbmi ? &values_int4<G, D, S> : nullptr; });
  });
}

}  // namespace kvcache::cpu::avx512
