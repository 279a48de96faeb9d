#include <algorithm>

#include "kernels/avx2/vectors.hpp"
#include "kernels/quantized_query.hpp"

namespace kvcache::cpu::avx2 {

// The chunk's codes stored; returns its step.
KVCACHE_AVX2 float quantize_chunk(const float* x, std::int8_t* codes) {
  const __m256 abs_bits = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 magnitude = _mm256_setzero_ps();
  for (std::uint32_t i = 0; i < kQueryChunk; i += 8)
    magnitude = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs_bits), magnitude);
  const float top = max_lane(magnitude);
  if (zero_chunk(top)) {
    std::fill_n(codes, kQueryChunk, std::int8_t{0});
    return 0.0f;
  }
  const __m256 scale = _mm256_set1_ps(127.0f / top);
  for (std::uint32_t i = 0; i < kQueryChunk; i += 16) {
    __m256i half[2];
    for (int h = 0; h < 2; ++h)
      half[h] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * h), scale));
    // Packs work per 128-bit half: words come out as 0-3, 8-11, 4-7, 12-15.
    const __m256i words = _mm256_permute4x64_epi64(_mm256_packs_epi32(half[0], half[1]), 0xD8);
    _mm_storeu_si128(
        reinterpret_cast<__m128i*>(codes + i),
        _mm_packs_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1)));
  }
  return top / 127.0f;
}

}  // namespace kvcache::cpu::avx2
