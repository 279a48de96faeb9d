#include "store/slot_codec.hpp"

#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu_features.hpp"
#include "kvcache/numeric.hpp"
#include "kvcache/status.hpp"

namespace kvcache::cpu {
namespace {

#define KVCACHE_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,f16c,fma")))

// GCC 12's AVX-512 headers warn about their own _mm*_undefined_* placeholders (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// round-half-even(RN(x / s)) for 16 lanes, equal to the reference's true division but mostly
// without dividing. With r = RN(1/s), t = RN(x * r) is within 2^-23 |x/s| of x/s, and RN(x/s)
// within 2^-24 |x/s|; codes stay below 2^8, so t and RN(x/s) are less than 2.3e-5 apart. When t
// is farther than that from every half-integer, both round to the same integer (and RN(x/s)
// cannot be a tie). Otherwise (about one lane in 10^4) the vector is divided exactly.
KVCACHE_AVX512 __m512 round_quotient(__m512 x, __m512 s, __m512 r) {
  const __m512 t = _mm512_mul_ps(x, r);
  // vreduceps: t minus t rounded to an integer, in one instruction.
  const __m512 rest =
      _mm512_abs_ps(_mm512_reduce_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  const __m512 q = _mm512_cmp_ps_mask(rest, _mm512_set1_ps(0.5f - 1e-4f), _CMP_GT_OQ) == 0
                       ? t
                       : _mm512_div_ps(x, s);
  return _mm512_roundscale_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

// Largest |x| of a row of d floats (d a multiple of 16), four independent chains.
KVCACHE_AVX512 float max_abs_avx512(const float* row, std::uint32_t d) {
  __m512 m[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                 _mm512_setzero_ps()};
  for (std::uint32_t i = 0; i < d; i += 16)
    m[(i / 16) % 4] = _mm512_max_ps(m[(i / 16) % 4], _mm512_abs_ps(_mm512_loadu_ps(row + i)));
  return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m[0], m[1]), _mm512_max_ps(m[2], m[3])));
}

// The seed's int8 scheme, byte-identical to the reference. The row stays in registers (V
// vectors of 16); quotients come from round_quotient's reasoning, with one check per row and
// a true division of the whole row in the rare case that any lane is near a tie. Codes are
// written with streaming stores: they are not read again soon, and this saves reading each
// destination line before writing it.
template <int V>
KVCACHE_AVX512 void encode_int8_rows(const float* row, std::uint32_t, std::byte* codes,
                                     std::byte* meta) {
  __m512 x[V];
  __m512 m0 = _mm512_setzero_ps(), m1 = m0;
  for (int i = 0; i < V; ++i) {
    x[i] = _mm512_loadu_ps(row + 16 * i);
    (i % 2 ? m1 : m0) = _mm512_max_ps(i % 2 ? m1 : m0, _mm512_abs_ps(x[i]));
  }
  const float scale = std::max(_mm512_reduce_max_ps(_mm512_max_ps(m0, m1)) / 127.0f, 1e-8f);
  std::memcpy(meta, &scale, sizeof(scale));
  const __m512 reciprocal = _mm512_set1_ps(1.0f / scale);
  __m512 t[V];
  __mmask16 near_tie = 0;
  for (int i = 0; i < V; ++i) {
    t[i] = _mm512_mul_ps(x[i], reciprocal);
    const __m512 rest =
        _mm512_abs_ps(_mm512_reduce_ps(t[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    near_tie |= _mm512_cmp_ps_mask(rest, _mm512_set1_ps(0.5f - 1e-4f), _CMP_GT_OQ);
  }
  if (near_tie != 0)
    for (int i = 0; i < V; ++i) t[i] = _mm512_div_ps(x[i], _mm512_set1_ps(scale));
  // |x / scale| <= 127.5, so the saturating narrowing is the reference's clamp; the conversion
  // rounds half to even (the default rounding mode).
  for (int i = 0; i < V; ++i)
    _mm_stream_si128(reinterpret_cast<__m128i*>(codes + 16 * i),
                     _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(t[i])));
}

KVCACHE_AVX512 void encode_fp16_avx512(const float* row, std::uint32_t d, std::byte* codes,
                                       std::byte*) {
  for (std::uint32_t i = 0; i < d; i += 16) {
    const __m256i h =
        _mm512_cvtps_ph(_mm512_loadu_ps(row + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
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
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF))), 16);
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x0040));
    const __m512i result = _mm512_mask_blend_epi32(nan, rounded, quiet);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + 2 * i), _mm512_cvtepi32_epi16(result));
  }
}

// fp8 E4M3 with a per token-head scale: the reference's steps (true division by the scale,
// binade from the exponent, round-half-even of the scaled mantissa) 16 lanes at a time.
KVCACHE_AVX512 void encode_fp8_avx512(const float* row, std::uint32_t d, std::byte* codes,
                                      std::byte* meta) {
  const float scale = std::max(max_abs_avx512(row, d) / kFp8E4M3Max, 1e-12f);
  std::memcpy(meta, &scale, sizeof(scale));
  const __m512 vscale = _mm512_set1_ps(scale);
  for (std::uint32_t i = 0; i < d; i += 16) {
    const __m512 y = _mm512_div_ps(_mm512_loadu_ps(row + i), vscale);
    const __m512i sign = _mm512_srli_epi32(
        _mm512_and_si512(_mm512_castps_si512(y), _mm512_set1_epi32(INT32_MIN)), 24);
    const __m512 a = _mm512_abs_ps(y);
    const __mmask16 saturated = _mm512_cmp_ps_mask(a, _mm512_set1_ps(kFp8E4M3Max), _CMP_GE_OQ);
    __m512 exponent = _mm512_max_ps(_mm512_getexp_ps(a), _mm512_set1_ps(-6.0f));
    __m512 m =
        _mm512_roundscale_ps(_mm512_scalef_ps(a, _mm512_sub_ps(_mm512_set1_ps(3.0f), exponent)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __mmask16 carry = _mm512_cmp_ps_mask(m, _mm512_set1_ps(16.0f), _CMP_EQ_OQ);
    m = _mm512_mask_mov_ps(m, carry, _mm512_set1_ps(8.0f));
    exponent = _mm512_mask_add_ps(exponent, carry, exponent, _mm512_set1_ps(1.0f));
    const __m512i mi = _mm512_cvtps_epi32(m);
    const __m512i biased = _mm512_add_epi32(_mm512_cvtps_epi32(exponent), _mm512_set1_epi32(7));
    const __m512i normal =
        _mm512_or_si512(_mm512_slli_epi32(biased, 3), _mm512_sub_epi32(mi, _mm512_set1_epi32(8)));
    const __mmask16 subnormal = _mm512_cmplt_epi32_mask(mi, _mm512_set1_epi32(8));
    __m512i code = _mm512_mask_mov_epi32(normal, subnormal, mi);
    code = _mm512_mask_mov_epi32(code, saturated, _mm512_set1_epi32(0x7E));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i),
                     _mm512_cvtepi32_epi8(_mm512_or_si512(code, sign)));
  }
}

// int4, asymmetric per group of head_dim: the reference's fp16-rounded scale and minimum, a
// true division, round-half-even, two codes per byte (even element in the low nibble).
KVCACHE_AVX512 void encode_int4_avx512(const float* row, std::uint32_t d, std::uint32_t group,
                                       std::byte* codes, std::byte* meta) {
  for (std::uint32_t start = 0; start < d; start += group) {
    __m512 lo = _mm512_loadu_ps(row + start), hi = lo;
    for (std::uint32_t i = start + 16; i < start + group; i += 16) {
      lo = _mm512_min_ps(lo, _mm512_loadu_ps(row + i));
      hi = _mm512_max_ps(hi, _mm512_loadu_ps(row + i));
    }
    const float low = _mm512_reduce_min_ps(lo), high = _mm512_reduce_max_ps(hi);
    const std::uint16_t scale16 = fp16_from_float((high - low) / 15.0f);
    const std::uint16_t min16 = fp16_from_float(low);
    std::memcpy(meta + start / group * 4, &scale16, 2);
    std::memcpy(meta + start / group * 4 + 2, &min16, 2);
    const float scale = float_from_fp16(scale16), minimum = float_from_fp16(min16);
    const __m512 vscale = _mm512_set1_ps(scale), reciprocal = _mm512_set1_ps(1.0f / scale);
    for (std::uint32_t i = start; i < start + group; i += 16) {
      __m512i q = _mm512_setzero_si512();
      if (scale > 0.0f) {
        const __m512 r = round_quotient(
            _mm512_sub_ps(_mm512_loadu_ps(row + i), _mm512_set1_ps(minimum)), vscale, reciprocal);
        q = _mm512_cvtps_epi32(
            _mm512_min_ps(_mm512_max_ps(r, _mm512_setzero_ps()), _mm512_set1_ps(15.0f)));
      }
      const __m128i bytes = _mm512_cvtepi32_epi8(q);  // 16 codes, one per byte
      const __m128i pairs =
          _mm_or_si128(_mm_and_si128(bytes, _mm_set1_epi16(0x000F)),
                       _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi16(0x00F0)));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + i / 2), _mm_packus_epi16(pairs, pairs));
    }
  }
}

KVCACHE_AVX512 void decode_fp32(const std::byte* codes, const std::byte*, std::uint32_t values,
                                float* out) {
  std::memcpy(out, codes, std::size_t{values} * sizeof(float));
}

KVCACHE_AVX512 void decode_fp16_avx512(const std::byte* codes, const std::byte*,
                                       std::uint32_t values, float* out) {
  for (std::uint32_t i = 0; i < values; i += 16)
    _mm512_storeu_ps(
        out + i,
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 2 * i))));
}

KVCACHE_AVX512 void decode_bf16_avx512(const std::byte* codes, const std::byte*,
                                       std::uint32_t values, float* out) {
  for (std::uint32_t i = 0; i < values; i += 16) {
    const __m512i w =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 2 * i)));
    _mm512_storeu_ps(out + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
}

// Codes with one float32 scale per token-head: 16 codes widened by Widen, times the scale.
template <class Widen>
KVCACHE_AVX512 void decode_scaled(const std::byte* codes, const std::byte* meta, std::uint32_t d,
                                  float* out) {
  float scale;
  std::memcpy(&scale, meta, sizeof(scale));
  const __m512 s = _mm512_set1_ps(scale);
  for (std::uint32_t i = 0; i < d; i += 16) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(Widen{}(bytes), s));
  }
}

struct WidenInt8 {
  KVCACHE_AVX512 __m512 operator()(__m128i bytes) const {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes));
  }
};

// fp8 E4M3 codes to floats.
struct WidenFp8 {
  KVCACHE_AVX512 __m512 operator()(__m128i bytes) const {
    const __m512i c = _mm512_cvtepu8_epi32(bytes);
    const __m512i exponent = _mm512_and_si512(_mm512_srli_epi32(c, 3), _mm512_set1_epi32(0xF));
    const __m512i mantissa = _mm512_and_si512(c, _mm512_set1_epi32(7));
    // Normal: rebias 7 -> 127 and widen the mantissa; subnormal (exponent 0): mantissa * 2^-9.
    const __m512i normal =
        _mm512_or_si512(_mm512_slli_epi32(_mm512_add_epi32(exponent, _mm512_set1_epi32(120)), 23),
                        _mm512_slli_epi32(mantissa, 20));
    const __m512 subnormal = _mm512_mul_ps(_mm512_cvtepi32_ps(mantissa), _mm512_set1_ps(0x1p-9f));
    const __mmask16 is_sub = _mm512_cmpeq_epi32_mask(exponent, _mm512_setzero_si512());
    __m512 value = _mm512_mask_mov_ps(_mm512_castsi512_ps(normal), is_sub, subnormal);
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x80)), 24);
    value = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(value), sign));
    return value;
  }
};

// int4-group in groups of Group elements: 8 bytes hold 16 codes (even element in the low nibble);
// code * scale + minimum, with the row's fp16 scales and minima widened together first.
template <std::uint32_t Group>
KVCACHE_AVX512 void decode_int4_avx512(const std::byte* codes, const std::byte* meta,
                                       std::uint32_t d, float* out) {
  alignas(64) float params[2 * 256 / 32];  // (scale, minimum) per group, head_dim <= 256
  const std::uint32_t halves = 2 * d / Group;
  for (std::uint32_t h = 0; h < halves; h += 8)
    _mm256_store_ps(params + h, _mm256_cvtph_ps(_mm_maskz_loadu_epi16(
                                    static_cast<__mmask8>((1u << std::min(8u, halves - h)) - 1),
                                    meta + 2 * h)));
  for (std::uint32_t i = 0; i < d; i += 16) {
    const __m128i packed = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i / 2));
    const __m128i bytes =
        _mm_unpacklo_epi8(_mm_and_si128(packed, _mm_set1_epi8(0x0F)),
                          _mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0F)));
    const __m512 x = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(bytes));
    _mm512_storeu_ps(out + i, _mm512_fmadd_ps(x, _mm512_set1_ps(params[2 * (i / Group)]),
                                              _mm512_set1_ps(params[2 * (i / Group) + 1])));
  }
}

#pragma GCC diagnostic pop

}  // namespace

SlotCodec::SlotCodec(const StoreFormat& format, std::uint32_t head_dim, std::uint32_t page_size)
    : spec_(format.spec),
      layout_(format.layout),
      head_dim_(head_dim),
      page_size_(page_size),
      external_(format.codec) {
  const FormatSpec& spec = spec_;
  if (layout_.slot_code_bytes == 0)
    throw Error(Code::unsupported, "format " + format.name + " has no per-slot layout");
  if (external_) return;  // its own codec, row by row or a run of slots at once
  if (spec.kind == FormatKind::fp32) fast_decode_ = &decode_fp32;
  if (has_avx512() && head_dim % 16 == 0) {
    if (spec.kind == FormatKind::int8_per_token && head_dim == 128)
      fast_encode_ = &encode_int8_rows<8>;
    if (spec.kind == FormatKind::int8_per_token && head_dim == 64)
      fast_encode_ = &encode_int8_rows<4>;
    if (spec.kind == FormatKind::fp16) fast_encode_ = &encode_fp16_avx512;
    if (spec.kind == FormatKind::bf16) fast_encode_ = &encode_bf16_avx512;
    if (spec.kind == FormatKind::fp8_e4m3) fast_encode_ = &encode_fp8_avx512;
    if (spec.kind == FormatKind::int4_group) fast_int4_ = true;
    if (spec.kind == FormatKind::fp16) fast_decode_ = &decode_fp16_avx512;
    if (spec.kind == FormatKind::bf16) fast_decode_ = &decode_bf16_avx512;
    if (spec.kind == FormatKind::int8_per_token) fast_decode_ = &decode_scaled<WidenInt8>;
    if (spec.kind == FormatKind::fp8_e4m3) fast_decode_ = &decode_scaled<WidenFp8>;
    if (spec.kind == FormatKind::int4_group && head_dim <= 256) {
      if (spec.group == 32) fast_decode_ = &decode_int4_avx512<32>;
      if (spec.group == 64) fast_decode_ = &decode_int4_avx512<64>;
      if (spec.group == 128) fast_decode_ = &decode_int4_avx512<128>;
    }
  } else if (vector_isa() == VectorIsa::avx2) {
    fast_encode_ = avx2::row_encoder(row_kind(), head_dim);
  }
}

RowFormat SlotCodec::row_kind() const {
  if (external_) return RowFormat::float32;
  switch (spec_.kind) {
    case FormatKind::fp16:
      return RowFormat::float16;
    case FormatKind::bf16:
      return RowFormat::bfloat16;
    case FormatKind::fp8_e4m3:
      return RowFormat::fp8;
    case FormatKind::int8_per_token:
      return RowFormat::int8;
    case FormatKind::int4_group:
      return int4_rows(spec_.group);
    default:
      return RowFormat::float32;
  }
}

DLTensor SlotCodec::rows_tensor(const float* rows, std::int64_t* shape) const {
  return {const_cast<float*>(rows), {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, nullptr, 0};
}

void SlotCodec::encode(const float* row, std::byte* tile, std::uint32_t slot) const {
  if (external_) {
    std::int64_t shape[2] = {1, head_dim_};
    external_->encode(rows_tensor(row, shape), slot, page_size_, tile);
  } else if (fast_int4_) {
    encode_int4_avx512(row, head_dim_, spec_.group, codes(tile, slot), meta(tile, slot));
  } else if (fast_encode_ != nullptr) {
    fast_encode_(row, head_dim_, codes(tile, slot), meta(tile, slot));
  } else {
    reference::encode(spec_, std::span<const float>(row, head_dim_), codes(tile, slot),
                      meta(tile, slot));
  }
}

void SlotCodec::decode_rows(const std::byte* tile, std::uint32_t first_slot, std::uint32_t n,
                            float* rows, const std::byte* ahead, std::size_t ahead_bytes) const {
  if (external_) {  // one call for the run: each call crosses the plugin boundary
    std::int64_t shape[2] = {n, head_dim_};
    DLTensor out = rows_tensor(rows, shape);
    if (n > 0) external_->decode(tile, first_slot, page_size_, out);
    return;
  }
  const std::size_t lines = ahead == nullptr ? 0 : ahead_bytes / 64;
  const std::size_t per_row = n == 0 ? 0 : (lines + n - 1) / n;  // an even share per row
  std::size_t next_line = 0;
  for (std::uint32_t j = 0; j < n; ++j) {
    for (std::size_t i = 0; i < per_row && next_line < lines; ++i, ++next_line)
      __builtin_prefetch(ahead + next_line * 64);
    const std::uint32_t slot = first_slot + j;
    float* row = rows + std::size_t{j} * head_dim_;
    if (fast_decode_ != nullptr) {
      fast_decode_(codes(tile, slot), meta(tile, slot), head_dim_, row);
    } else {
      decode(tile, slot, row);
    }
  }
}

void SlotCodec::finish_writes() {
  _mm_sfence();
}

void SlotCodec::encode_group(const float* rows, std::byte* tile, std::uint32_t first_slot) const {
  reference::encode_group(spec_, std::span<const float>(rows, std::size_t{spec_.group} * head_dim_),
                          head_dim_, codes(tile, first_slot), meta(tile, first_slot));
}

void SlotCodec::decode(const std::byte* tile, std::uint32_t slot, float* row) const {
  if (external_) return decode_rows(tile, slot, 1, row);
  reference::decode(spec_, codes(tile, slot), meta(tile, slot), std::span<float>(row, head_dim_));
}

}  // namespace kvcache::cpu
