// Scalar conversions between float32 and the narrow float types of the storage formats. These are
// the definitions every kernel is checked against: round to nearest, ties to even.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace kvcache {

// IEEE binary16. The compiler's _Float16 where it has one (an instruction where the ISA has it);
// otherwise (clang before 15 on x86) the same bits in integer arithmetic, which the tests check
// against _Float16 wherever both exist.
namespace detail {

inline std::uint16_t fp16_from_float_bits(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) {  // NaN stays a NaN, made quiet, with its top payload bits
    return sign | static_cast<std::uint16_t>(0x7E00u | ((magnitude >> 13) & 0x3FFu));
  }
  if (magnitude >= 0x477FF000u) return sign | 0x7C00u;       // 65520 and up round to infinity
  if (magnitude >= 0x38800000u) {                            // a normal half: 2^-14 and up
    const std::uint32_t rebiased = magnitude - 0x38000000u;  // exponent bias 127 -> 15
    const std::uint32_t rounded = rebiased + 0xFFFu + ((rebiased >> 13) & 1u);
    return sign | static_cast<std::uint16_t>(rounded >> 13);
  }
  // A subnormal half, m * 2^-24: shift the float's significand so its last kept bit is 2^-24.
  const int shift = 126 - static_cast<int>(magnitude >> 23);
  if (shift > 24) return sign;  // below 2^-25: rounds to zero
  const std::uint32_t significand = (magnitude & 0x7FFFFFu) | 0x800000u;
  const std::uint32_t kept = significand >> shift;
  const std::uint32_t rest = significand & ((1u << shift) - 1u);
  const std::uint32_t halfway = 1u << (shift - 1);
  const bool up = rest > halfway || (rest == halfway && (kept & 1u) != 0);
  return sign | static_cast<std::uint16_t>(kept + (up ? 1u : 0u));
}

inline float float_from_fp16_bits(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t{h & 0x8000u} << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1Fu;
  const std::uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  if (exponent != 0)
    return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;  // subnormal: exact in float
  return sign != 0 ? -magnitude : magnitude;
}

}  // namespace detail

#ifdef __FLT16_MANT_DIG__
inline std::uint16_t fp16_from_float(float x) {
  return std::bit_cast<std::uint16_t>(static_cast<_Float16>(x));
}
inline float float_from_fp16(std::uint16_t h) {
  return static_cast<float>(std::bit_cast<_Float16>(h));
}
#else
inline std::uint16_t fp16_from_float(float x) {
  return detail::fp16_from_float_bits(x);
}
inline float float_from_fp16(std::uint16_t h) {
  return detail::float_from_fp16_bits(h);
}
#endif

// bfloat16: the upper half of a float32, rounded to nearest even; NaN stays a quiet NaN.
inline std::uint16_t bf16_from_float(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  const std::uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}
inline float float_from_bf16(std::uint16_t b) {
  return std::bit_cast<float>(std::uint32_t{b} << 16);
}

// OCP FP8 E4M3 ("E4M3FN"): bias 7, no infinities, 0x7F/0xFF are NaN, largest finite 448.
// Encoding saturates at +-448, as the KV formats always scale into range first.
inline constexpr float kFp8E4M3Max = 448.0f;

inline std::uint8_t fp8_e4m3_from_float(float x) {
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | 0x7F;
  const float a = std::fabs(x);
  if (a >= kFp8E4M3Max) return sign | 0x7E;
  int e = 0;
  std::frexp(a, &e);                         // a = f * 2^e with f in [0.5, 1)
  const int exponent = std::max(e - 1, -6);  // below 2^-6 the spacing is that of subnormals
  const float quantum = std::ldexp(1.0f, exponent - 3);
  int m = static_cast<int>(std::nearbyint(a / quantum));  // exact division by a power of two
  int biased = exponent + 7;
  if (m == 16) {  // rounded up into the next binade
    m = 8;
    ++biased;
  }
  if (m < 8) return sign | static_cast<std::uint8_t>(m);  // subnormal (biased exponent 0)
  return sign | static_cast<std::uint8_t>((biased << 3) | (m - 8));
}

inline float float_from_fp8_e4m3(std::uint8_t c) {
  const int biased = (c >> 3) & 0xF;
  const int mantissa = c & 0x7;
  if ((c & 0x7F) == 0x7F) return std::nanf("");
  const float magnitude = biased == 0 ? std::ldexp(static_cast<float>(mantissa), -9)
                                      : std::ldexp(1.0f + mantissa / 8.0f, biased - 7);
  return (c & 0x80) ? -magnitude : magnitude;
}

}  // namespace kvcache
