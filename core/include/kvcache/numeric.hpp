// Scalar conversions between float32 and the narrow float types of the storage formats. These are
// the definitions every kernel is checked against: round to nearest, ties to even.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace kvcache {

// IEEE binary16 through the compiler's _Float16 (hardware where the ISA has it).
inline std::uint16_t fp16_from_float(float x) {
  return std::bit_cast<std::uint16_t>(static_cast<_Float16>(x));
}
inline float float_from_fp16(std::uint16_t h) {
  return static_cast<float>(std::bit_cast<_Float16>(h));
}

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
