#include "kernels/quantized_query.hpp"

#include "kernels/avx512/vectors.hpp"

namespace kvcache::cpu::avx512 {

KVCACHE_KERNELS_BEGIN
// q ([group][dim]) for the AVX-512 integer key passes (see QuantizedQuery): per head its codes, in
// element order (int8 keys) or its even elements then its odd ones (int4), and per part of 32
// elements the step and step x the code sum x sum_unit. All chunks at once (group x dim /
// kQueryChunk, at most 16): their largest magnitudes by one lane network and their steps and scales
// by one vector division each, instead of a horizontal maximum and two scalar divisions per chunk;
// the rest in vectors too (the generic code's scalar sums and strided copies took as long as the
// quantization).
KVCACHE_AVX512 void quantize_query(const float* q, std::uint32_t group, std::uint32_t dim,
                                   bool even_then_odd, float sum_unit, std::int8_t* to,
                                   float* step_of, float* sum_of) {
  const std::uint32_t chunks = group * dim / kQueryChunk, per_head = dim / kQueryChunk;
  __m512 magnitude[16];
  for (std::uint32_t c = 0; c < 16; ++c) {
    magnitude[c] = _mm512_setzero_ps();
    if (c < chunks)
      for (std::uint32_t i = 0; i < kQueryChunk; i += 16)
        magnitude[c] =
            _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(q + c * kQueryChunk + i)), magnitude[c]);
  }
  // Lane c: chunk c's largest magnitude; live where it is a normal float (see zero_chunk).
  const __m512 top = _mm512_permutexvar_ps(_mm512_load_si512(sum_order().lane_of_slot),
                                           sum_lanes16<MaxFloats>(magnitude));
  const __mmask16 live =
      _mm512_cmp_ps_mask(top, _mm512_set1_ps(std::numeric_limits<float>::min()), _CMP_GE_OQ);
  alignas(64) float steps[16], scales[16];
  _mm512_store_ps(steps, _mm512_maskz_div_ps(live, top, _mm512_set1_ps(127.0f)));
  _mm512_store_ps(scales, _mm512_maskz_div_ps(live, _mm512_set1_ps(127.0f), top));

  // Per 128-bit lane its 8 even bytes, then its 8 odd ones; then the lanes' even halves first.
  const __m512i lane_split =
      _mm512_broadcast_i32x4(_mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
  const __m512i halves = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  for (std::uint32_t c = 0; c < chunks; ++c) {
    const float* x = q + c * kQueryChunk;
    __m512i codes = _mm512_setzero_si512();
    if ((live >> c) & 1) {
      const __m512 scale = _mm512_set1_ps(scales[c]);
      __m128i quarter[4];
      for (int i = 0; i < 4; ++i)
        quarter[i] = _mm512_cvtsepi32_epi8(
            _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * i), scale)));
      codes = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(quarter[1], quarter[0])),
                                 _mm256_set_m128i(quarter[3], quarter[2]), 1);
    }
    // Sums of 8 codes per 64-bit lane, each code read as code + 128.
    const __m512i eights = _mm512_sad_epu8(_mm512_xor_si512(codes, bias), _mm512_setzero_si512());
    for (int part = 0; part < 2; ++part) {
      const auto sum = static_cast<std::int32_t>(
          _mm512_mask_reduce_add_epi64(static_cast<__mmask8>(0x0F << (4 * part)), eights) -
          32 * 128);
      step_of[2 * c + part] = steps[c];
      sum_of[2 * c + part] = steps[c] * static_cast<float>(sum) * sum_unit;
    }
    std::int8_t* head = to + c / per_head * dim;
    const std::uint32_t chunk = c % per_head;
    if (!even_then_odd) {
      _mm512_storeu_si512(head + chunk * kQueryChunk, codes);
      continue;
    }
    const __m512i split = _mm512_permutexvar_epi64(halves, _mm512_shuffle_epi8(codes, lane_split));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(head + chunk * 32),
                        _mm512_castsi512_si256(split));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(head + dim / 2 + chunk * 32),
                        _mm512_extracti64x4_epi64(split, 1));
  }
}
KVCACHE_KERNELS_END

}  // namespace kvcache::cpu::avx512
