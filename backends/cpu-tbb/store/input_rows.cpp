#include "store/input_rows.hpp"

#include <immintrin.h>

#include "kernels/cpu_features.hpp"
#include "kvcache/numeric.hpp"

namespace kvcache::cpu {
namespace {

std::string shape_of(const DLTensor& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim; ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + "]";
}

void check_layout(const DLTensor& t, std::uint64_t rows, std::uint32_t heads, std::uint32_t dim,
                  const char* name) {
  if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost)
    throw Error(Code::invalid_argument, std::string(name) + " must be in host memory");
  if (t.data == nullptr && rows > 0)
    throw Error(Code::invalid_argument, std::string(name) + " has no data");
  if (t.ndim != 3 || t.shape[0] != static_cast<int64_t>(rows) || t.shape[1] != heads ||
      t.shape[2] != dim) {
    // Built only here, by appending (every layer checks its tensors; GCC 12 warns falsely,
    // -Wrestrict, on "literal" + std::string&&).
    std::string expected = "[";
    expected +=
        std::to_string(rows) + ", " + std::to_string(heads) + ", " + std::to_string(dim) + "]";
    throw Error(Code::invalid_argument,
                std::string(name) + " has shape " + shape_of(t) + ", expected " + expected);
  }
  if (t.strides != nullptr && (t.strides[2] != 1 || t.strides[1] != dim ||
                               t.strides[0] != static_cast<int64_t>(heads) * dim))
    throw Error(Code::invalid_argument, std::string(name) + " must be row-major and compact");
  if (t.dtype.lanes != 1)
    throw Error(Code::invalid_argument, std::string(name) + " must not be vectorized");
}

// GCC 12's AVX-512 headers warn about their own placeholders (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) void widen_fp16_avx512(const std::uint16_t* in, float* out,
                                                          std::uint32_t n) {
  for (std::uint32_t i = 0; i < n; i += 16)
    _mm512_storeu_ps(out + i,
                     _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i))));
}
__attribute__((target("avx512f"))) void widen_bf16_avx512(const std::uint16_t* in, float* out,
                                                          std::uint32_t n) {
  for (std::uint32_t i = 0; i < n; i += 16) {
    const __m512i w =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
    _mm512_storeu_ps(out + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
}
#pragma GCC diagnostic pop

// Without these an AVX2 host widens through a software conversion: appends of float16 input
// took 7 to 10 times as long as of float32 input.
__attribute__((target("avx2,f16c"))) void widen_fp16_avx2(const std::uint16_t* in, float* out,
                                                          std::uint32_t n) {
  for (std::uint32_t i = 0; i < n; i += 8)
    _mm256_storeu_ps(out + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
}
__attribute__((target("avx2"))) void widen_bf16_avx2(const std::uint16_t* in, float* out,
                                                     std::uint32_t n) {
  for (std::uint32_t i = 0; i < n; i += 8) {
    const __m256i w =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
}

}  // namespace

void InputRows::widen(const std::uint16_t* in, float* out) const {
  const bool fp16 = code_ == kDLFloat;
  if (has_avx512() && dim_ % 16 == 0) {
    (fp16 ? widen_fp16_avx512 : widen_bf16_avx512)(in, out, dim_);
    return;
  }
  if (vector_isa() != VectorIsa::portable && dim_ % 8 == 0) {
    (fp16 ? widen_fp16_avx2 : widen_bf16_avx2)(in, out, dim_);
    return;
  }
  for (std::uint32_t i = 0; i < dim_; ++i)
    out[i] = fp16 ? float_from_fp16(in[i]) : float_from_bf16(in[i]);
}

InputRows::InputRows(const DLTensor& t, std::uint64_t rows, std::uint32_t heads, std::uint32_t dim,
                     const char* name)
    : base_(static_cast<const std::byte*>(t.data) + t.byte_offset),
      heads_(heads),
      dim_(dim),
      code_(t.dtype.code),
      bits_(static_cast<std::uint8_t>(t.dtype.bits)) {
  check_layout(t, rows, heads, dim, name);
  const bool ok =
      (code_ == kDLFloat && (bits_ == 32 || bits_ == 16)) || (code_ == kDLBfloat && bits_ == 16);
  if (!ok)
    throw Error(Code::invalid_argument,
                std::string(name) + " must be float32, float16 or bfloat16 (DLPack code " +
                    std::to_string(code_) + ", " + std::to_string(bits_) + " bits given)");
}

float* output_rows(DLTensor& t, std::uint64_t rows, std::uint32_t heads, std::uint32_t dim,
                   const char* name) {
  check_layout(t, rows, heads, dim, name);
  if (t.dtype.code != kDLFloat || t.dtype.bits != 32)
    throw Error(Code::invalid_argument, std::string(name) + " must be float32");
  return reinterpret_cast<float*>(static_cast<std::byte*>(t.data) + t.byte_offset);
}

}  // namespace kvcache::cpu
