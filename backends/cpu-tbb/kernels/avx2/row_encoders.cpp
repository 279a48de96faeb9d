// The AVX2 row encoders: fp16, int8-per-token and int4-group rows of finite values written
// exactly as the reference writes them (kvcache::reference::encode), 8 lanes at a time. Without
// them an AVX2 host appends through the reference's scalar loops (fp16 through a software
// conversion): 5 to 12 times slower than bf16's or fp32's appends, which stay on the reference
// (they are already as fast as a copy). Quotients use a true division, as the reference does, so
// no lane can round differently; the int8 packing saturates, which is the reference's clamp.
#include "store/row_encoders.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/avx2/vectors.hpp"

namespace kvcache::cpu::avx2 {
namespace {

KVCACHE_AVX2 float lane_max(__m256 v) {
  const __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 pairs = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(pairs, _mm_shuffle_ps(pairs, pairs, 1)));
}

KVCACHE_AVX2 float lane_min(__m256 v) {
  const __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 pairs = _mm_min_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_min_ss(pairs, _mm_shuffle_ps(pairs, pairs, 1)));
}

KVCACHE_AVX2 void encode_fp16(const float* row, std::uint32_t d, std::byte* codes, std::byte*) {
  for (std::uint32_t i = 0; i < d; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + 2 * i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(row + i), _MM_FROUND_TO_NEAREST_INT));
}

// 8 int32 lanes to 8 int8 codes, saturating.
KVCACHE_AVX2 std::uint64_t saturate_to_int8(__m256i v) {
  const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  return static_cast<std::uint64_t>(_mm_cvtsi128_si64(_mm_packs_epi16(words, words)));
}

// The largest |x| skips NaNs, as the reference's std::max does (max_ps gives its second operand
// when either is a NaN).
KVCACHE_AVX2 void encode_int8(const float* row, std::uint32_t d, std::byte* codes,
                              std::byte* meta) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 m = _mm256_setzero_ps();
  for (std::uint32_t i = 0; i < d; i += 8)
    m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(row + i), magnitude), m);
  const float scale = std::max(lane_max(m) / 127.0f, 1e-8f);
  std::memcpy(meta, &scale, sizeof(scale));
  const __m256 s = _mm256_set1_ps(scale);
  for (std::uint32_t i = 0; i < d; i += 8) {  // the default rounding: half to even
    const std::uint64_t bytes =
        saturate_to_int8(_mm256_cvtps_epi32(_mm256_div_ps(_mm256_loadu_ps(row + i), s)));
    std::memcpy(codes + i, &bytes, sizeof(bytes));
  }
}

// Asymmetric 4-bit codes per group of Group elements: the fp16-rounded scale and minimum, then
// codes in [0, 15], two a byte, the even element in the low nibble.
template <std::uint32_t Group>
KVCACHE_AVX2 void encode_int4(const float* row, std::uint32_t d, std::byte* codes,
                              std::byte* meta) {
  for (std::uint32_t start = 0; start < d; start += Group) {
    __m256 lo = _mm256_loadu_ps(row + start), hi = lo;
    for (std::uint32_t i = start + 8; i < start + Group; i += 8) {
      lo = _mm256_min_ps(lo, _mm256_loadu_ps(row + i));
      hi = _mm256_max_ps(hi, _mm256_loadu_ps(row + i));
    }
    const float low = lane_min(lo), high = lane_max(hi);
    const std::uint16_t scale16 = _cvtss_sh((high - low) / 15.0f, _MM_FROUND_TO_NEAREST_INT);
    const std::uint16_t min16 = _cvtss_sh(low, _MM_FROUND_TO_NEAREST_INT);
    std::memcpy(meta + start / Group * 4, &scale16, 2);
    std::memcpy(meta + start / Group * 4 + 2, &min16, 2);
    const float scale = _cvtsh_ss(scale16);
    const __m256 vscale = _mm256_set1_ps(scale), minimum = _mm256_set1_ps(_cvtsh_ss(min16));
    for (std::uint32_t i = start; i < start + Group; i += 8) {
      __m256i q = _mm256_setzero_si256();
      if (scale > 0.0f) {  // clamped before the conversion, as the reference clamps before its cast
        const __m256 quotient =
            _mm256_div_ps(_mm256_sub_ps(_mm256_loadu_ps(row + i), minimum), vscale);
        q = _mm256_cvtps_epi32(
            _mm256_min_ps(_mm256_max_ps(quotient, _mm256_setzero_ps()), _mm256_set1_ps(15.0f)));
      }
      // Each 64-bit lane holds an (even, odd) pair: the odd code moves next to the even one,
      // and byte 0 of every 64-bit lane is the pair's byte.
      const __m256i pairs = _mm256_or_si256(q, _mm256_srli_epi64(q, 28));
      alignas(32) std::uint64_t lanes[4];
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), pairs);
      for (int j = 0; j < 4; ++j) codes[i / 2 + j] = static_cast<std::byte>(lanes[j] & 0xFF);
    }
  }
}

}  // namespace

RowEncoder row_encoder(RowFormat kind, std::uint32_t head_dim) {
  if (head_dim % 8 != 0) return nullptr;
  switch (kind) {
    case RowFormat::float16:
      return &encode_fp16;
    case RowFormat::int8:
      return &encode_int8;
    case RowFormat::int4_g32:
      return &encode_int4<32>;
    case RowFormat::int4_g64:
      return head_dim % 64 == 0 ? &encode_int4<64> : nullptr;
    case RowFormat::int4_g128:
      return head_dim % 128 == 0 ? &encode_int4<128> : nullptr;
    default:
      return nullptr;
  }
}

}  // namespace kvcache::cpu::avx2
