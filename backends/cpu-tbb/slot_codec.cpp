#include "slot_codec.hpp"

#include <immintrin.h>

#include <algorithm>

#include "kvcache/status.hpp"

namespace kvcache::cpu {
namespace {

#define KVCACHE_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

// GCC 12's AVX-512 headers warn about their own _mm*_undefined_* placeholders (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

bool has_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
  return yes;
}

// The seed's int8 scheme, 16 lanes at a time: a true division and round-half-even, like the
// reference, so the bytes are identical.
KVCACHE_AVX512 void encode_int8_avx512(const float* row, std::uint32_t d, std::byte* codes,
                                       std::byte* meta) {
  __m512 amax = _mm512_setzero_ps();
  for (std::uint32_t i = 0; i < d; i += 16) amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_loadu_ps(row + i)));
  const float scale = std::max(_mm512_reduce_max_ps(amax) / 127.0f, 1e-8f);
  std::memcpy(meta, &scale, sizeof(scale));
  const __m512 vscale = _mm512_set1_ps(scale);
  const __m512 lo = _mm512_set1_ps(-128.0f);
  const __m512 hi = _mm512_set1_ps(127.0f);
  for (std::uint32_t i = 0; i < d; i += 16) {
    const __m512 q = _mm512_div_ps(_mm512_loadu_ps(row + i), vscale);
    const __m512 r = _mm512_roundscale_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512i c = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(r, lo), hi));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), _mm512_cvtsepi32_epi8(c));
  }
}

KVCACHE_AVX512 void encode_fp16_avx512(const float* row, std::uint32_t d, std::byte* codes,
                                       std::byte*) {
  for (std::uint32_t i = 0; i < d; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(row + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + 2 * i), h);
  }
}

// bfloat16 with round-to-nearest-even and quiet NaNs, exactly as bf16_from_float.
KVCACHE_AVX512 void encode_bf16_avx512(const float* row, std::uint32_t d, std::byte* codes,
                                       std::byte*) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i inf = _mm512_set1_epi32(0x7F800000);
  for (std::uint32_t i = 0; i < d; i += 16) {
    const __m512i bits = _mm512_castps_si512(_mm512_loadu_ps(row + i));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, abs_mask), inf);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i rounded =
        _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF))), 16);
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x0040));
    const __m512i result = _mm512_mask_blend_epi32(nan, rounded, quiet);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + 2 * i), _mm512_cvtepi32_epi16(result));
  }
}

#pragma GCC diagnostic pop

}  // namespace

SlotCodec::SlotCodec(const FormatSpec& spec, std::uint32_t head_dim, std::uint32_t page_size)
    : spec_(spec), layout_(format_layout(spec, head_dim, page_size)), head_dim_(head_dim) {
  if (layout_.slot_code_bytes == 0)
    throw Error(Code::unsupported, "format " + spec.name() + " has no per-slot layout");
  if (has_avx512() && head_dim % 16 == 0) {
    if (spec.kind == FormatKind::int8_per_token) fast_encode_ = &encode_int8_avx512;
    if (spec.kind == FormatKind::fp16) fast_encode_ = &encode_fp16_avx512;
    if (spec.kind == FormatKind::bf16) fast_encode_ = &encode_bf16_avx512;
  }
}

void SlotCodec::encode(const float* row, std::byte* tile, std::uint32_t slot) const {
  if (fast_encode_ != nullptr) {
    fast_encode_(row, head_dim_, codes(tile, slot), meta(tile, slot));
  } else {
    reference::encode(spec_, std::span<const float>(row, head_dim_), codes(tile, slot),
                      meta(tile, slot));
  }
}

void SlotCodec::encode_group(const float* rows, std::byte* tile, std::uint32_t first_slot) const {
  reference::encode_group(spec_, std::span<const float>(rows, std::size_t{spec_.group} * head_dim_),
                          head_dim_, codes(tile, first_slot), meta(tile, first_slot));
}

void SlotCodec::decode(const std::byte* tile, std::uint32_t slot, float* row) const {
  reference::decode(spec_, codes(tile, slot), meta(tile, slot), std::span<float>(row, head_dim_));
}

}  // namespace kvcache::cpu
