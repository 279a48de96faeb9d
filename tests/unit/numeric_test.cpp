// The narrow float conversions that define the storage formats.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "kvcache/numeric.hpp"

namespace kvcache {
namespace {

TEST(Fp16, EveryCodeRoundTrips) {
  for (std::uint32_t c = 0; c < 0x10000; ++c) {
    const auto h = static_cast<std::uint16_t>(c);
    const float f = float_from_fp16(h);
    if (std::isnan(f)) continue;
    EXPECT_EQ(fp16_from_float(f), h) << std::hex << c;
  }
}

TEST(Fp16, RoundsToNearestEven) {
  EXPECT_EQ(fp16_from_float(1.0f), 0x3C00);
  EXPECT_EQ(fp16_from_float(1.0f + 0x1p-11f), 0x3C00);      // tie: to even
  EXPECT_EQ(fp16_from_float(1.0f + 3 * 0x1p-11f), 0x3C02);  // tie: to even
  EXPECT_EQ(fp16_from_float(65520.0f), 0x7C00);             // overflows to infinity
  EXPECT_EQ(fp16_from_float(0x1p-24f), 0x0001);             // smallest subnormal
}

// The integer conversion (what compilers without _Float16 use) against the rounding rules, on
// every half code and on the floats around every rounding boundary.
TEST(Fp16, IntegerConversionRoundsLikeIeee) {
  for (std::uint32_t c = 0; c < 0x10000; ++c) {
    const auto h = static_cast<std::uint16_t>(c);
    const float f = detail::float_from_fp16_bits(h);
    if (std::isnan(f)) {
      EXPECT_EQ(h & 0x7C00u, 0x7C00u);
      EXPECT_TRUE(std::isnan(float_from_fp16(detail::fp16_from_float_bits(f)))) << std::hex << c;
      continue;
    }
    EXPECT_EQ(detail::fp16_from_float_bits(f), h) << std::hex << c;
    EXPECT_EQ(std::bit_cast<std::uint32_t>(f), std::bit_cast<std::uint32_t>(float_from_fp16(h)));
    if ((c & 0x7FFFu) >= 0x7BFFu) continue;  // the largest finite and infinity have no next code
    // Halfway to the next code up in magnitude: ties go to the even code, neighbours round in.
    const float next = detail::float_from_fp16_bits(static_cast<std::uint16_t>(c + 1));
    const float mid = f + (next - f) / 2;
    const std::uint16_t even = (c & 1u) == 0 ? h : static_cast<std::uint16_t>(c + 1);
    EXPECT_EQ(detail::fp16_from_float_bits(mid), even) << std::hex << c;
    EXPECT_EQ(detail::fp16_from_float_bits(std::nextafter(mid, f)), h) << std::hex << c;
    EXPECT_EQ(detail::fp16_from_float_bits(std::nextafter(mid, next)), c + 1) << std::hex << c;
  }
  EXPECT_EQ(detail::fp16_from_float_bits(65520.0f), 0x7C00);
  EXPECT_EQ(detail::fp16_from_float_bits(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
  EXPECT_EQ(detail::fp16_from_float_bits(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(detail::fp16_from_float_bits(0x1p-25f), 0x0000);  // tie between 0 and 2^-24: even
  EXPECT_EQ(detail::fp16_from_float_bits(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(detail::fp16_from_float_bits(std::numeric_limits<float>::denorm_min()), 0x0000);
}

#ifdef __FLT16_MANT_DIG__
TEST(Fp16, IntegerConversionEqualsTheCompilers) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 1'000'000; ++i) {
    const float f = std::bit_cast<float>(bits(rng));
    if (std::isnan(f)) continue;
    ASSERT_EQ(detail::fp16_from_float_bits(f), fp16_from_float(f)) << std::hexfloat << f;
  }
}
#endif

TEST(Bf16, RoundsToNearestEvenAndKeepsSpecials) {
  EXPECT_EQ(bf16_from_float(1.0f), 0x3F80);
  EXPECT_EQ(bf16_from_float(std::bit_cast<float>(0x3F808000u)), 0x3F80);  // tie, even stays
  EXPECT_EQ(bf16_from_float(std::bit_cast<float>(0x3F818000u)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(bf16_from_float(std::bit_cast<float>(0x3F808001u)), 0x3F81);
  EXPECT_EQ(bf16_from_float(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_TRUE(std::isnan(float_from_bf16(bf16_from_float(std::nanf("")))));
  for (std::uint32_t c = 0; c < 0x10000; ++c) {
    const float f = float_from_bf16(static_cast<std::uint16_t>(c));
    if (!std::isnan(f)) {
      EXPECT_EQ(bf16_from_float(f), c);
    }
  }
}

TEST(Fp8E4M3, TableOfKnownValues) {
  EXPECT_EQ(fp8_e4m3_from_float(0.0f), 0x00);
  EXPECT_EQ(fp8_e4m3_from_float(-0.0f), 0x80);
  EXPECT_EQ(fp8_e4m3_from_float(1.0f), 0x38);
  EXPECT_EQ(fp8_e4m3_from_float(448.0f), 0x7E);
  EXPECT_EQ(fp8_e4m3_from_float(1e6f), 0x7E);  // saturates
  EXPECT_EQ(fp8_e4m3_from_float(-1e6f), 0xFE);
  EXPECT_EQ(fp8_e4m3_from_float(0x1p-9f), 0x01);  // smallest subnormal
  EXPECT_EQ(fp8_e4m3_from_float(0x1p-6f), 0x08);  // smallest normal
  EXPECT_EQ(fp8_e4m3_from_float(1.0625f), 0x38);  // tie between 1 and 1.125: even
  EXPECT_EQ(fp8_e4m3_from_float(1.1875f), 0x3A);  // tie between 1.125 and 1.25: even
  EXPECT_EQ(float_from_fp8_e4m3(0x7E), 448.0f);
  EXPECT_TRUE(std::isnan(float_from_fp8_e4m3(0x7F)));
  EXPECT_TRUE(std::isnan(float_from_fp8_e4m3(0xFF)));
}

TEST(Fp8E4M3, EncodesToTheNearestCodeAmongAll256) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-12, 9);
  for (int i = 0; i < 20000; ++i) {
    const float x = std::ldexp(mantissa(rng), exponent(rng));
    const float got = float_from_fp8_e4m3(fp8_e4m3_from_float(x));
    float best = 0.0f;
    float best_error = std::numeric_limits<float>::infinity();
    for (int c = 0; c < 256; ++c) {
      const float v = float_from_fp8_e4m3(static_cast<std::uint8_t>(c));
      if (std::isnan(v)) continue;
      const float e = std::fabs(v - std::clamp(x, -kFp8E4M3Max, kFp8E4M3Max));
      if (e < best_error) best_error = e, best = v;
    }
    EXPECT_EQ(std::fabs(got - std::clamp(x, -kFp8E4M3Max, kFp8E4M3Max)), best_error)
        << "x=" << x << " got " << got << " nearest " << best;
  }
  for (int c = 0; c < 256; ++c) {
    const float v = float_from_fp8_e4m3(static_cast<std::uint8_t>(c));
    if (!std::isnan(v)) {
      EXPECT_EQ(fp8_e4m3_from_float(v), c);
    }
  }
}

}  // namespace
}  // namespace kvcache
