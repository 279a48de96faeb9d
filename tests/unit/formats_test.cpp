// Built-in storage formats: names, layouts, and the reference codec's exactness and error bounds.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvcache/formats.hpp"
#include "kvcache/status.hpp"

namespace kvcache {
namespace {

using ::testing::HasSubstr;

TEST(Formats, NamesAndOptions) {
  EXPECT_EQ(parse_format("int4-group", {{"group", 64}}).group, 64u);
  EXPECT_EQ(parse_format("int4-group").group, 32u);
  EXPECT_EQ(parse_format("bf16").kind, FormatKind::bf16);
  for (const std::string& name : format_names()) EXPECT_EQ(parse_format(name).name(), name);
  try {
    parse_format("int8-per-tokn");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::not_found);
    EXPECT_THAT(e.what(), HasSubstr("did you mean 'int8-per-token'?"));
  }
  EXPECT_THROW(parse_format("int4-group", {{"group", 48}}), Error);
  EXPECT_THROW(parse_format("fp16", {{"group", 32}}), Error);
}

TEST(Formats, LayoutsCountScales) {
  const TileLayout i8 = format_layout(parse_format("int8-per-token"), 128, 16);
  EXPECT_EQ(i8.slot_code_bytes, 128u);
  EXPECT_EQ(i8.slot_meta_bytes, 4u);
  EXPECT_EQ(i8.code_bytes, 2048u);
  EXPECT_EQ(i8.tile_bytes, 2112u);
  const TileLayout i4 = format_layout(parse_format("int4-group", {{"group", 32}}), 128, 16);
  EXPECT_EQ(i4.slot_code_bytes, 64u);
  EXPECT_EQ(i4.slot_meta_bytes, 16u);  // 4 groups x (fp16 scale + fp16 minimum)
  EXPECT_EQ(i4.tile_bytes, 16u * 80u);
  EXPECT_FALSE(i4.symmetric);
  EXPECT_EQ(format_layout(parse_format("fp16"), 128, 16).tile_bytes, 4096u);
  EXPECT_THROW(format_layout(parse_format("int4-group", {{"group", 128}}), 96, 16), Error);
}

// The seed's KVCacheQuantizer, written out again in fp32: scale = max|x|/127 floored at 1e-8,
// codes = round-half-to-even(x / scale) clamped to [-128, 127].
TEST(Formats, Int8PerTokenIsTheSeedFormulaBitForBit) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<std::vector<float>> cases = {
      {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 3.5f},  // ties: scale is exactly 1
      std::vector<float>(8, 0.0f),                            // the 1e-8 floor
  };
  for (int i = 0; i < 200; ++i) {
    std::vector<float> x(64);
    for (float& v : x) v = normal(rng) * (i % 7 == 0 ? 1e-9f : 1.0f);
    cases.push_back(x);
  }
  const FormatSpec spec = parse_format("int8-per-token");
  for (const auto& x : cases) {
    std::vector<std::byte> codes(x.size());
    float scale = 0.0f;
    reference::encode(spec, x, codes.data(), reinterpret_cast<std::byte*>(&scale));
    float amax = 0.0f;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    const float expected_scale = std::max(amax / 127.0f, 1e-8f);
    ASSERT_EQ(std::bit_cast<std::uint32_t>(scale), std::bit_cast<std::uint32_t>(expected_scale));
    for (std::size_t i = 0; i < x.size(); ++i) {
      const float q = std::clamp(std::nearbyint(x[i] / expected_scale), -128.0f, 127.0f);
      ASSERT_EQ(static_cast<std::int8_t>(codes[i]), static_cast<std::int8_t>(q)) << i;
    }
  }
  std::vector<std::byte> codes(8);
  float scale = 0.0f;
  reference::encode(spec, cases[0], codes.data(), reinterpret_cast<std::byte*>(&scale));
  const std::vector<int> ties{127, 0, 2, 2, 0, -2, -2, 4};
  for (std::size_t i = 0; i < ties.size(); ++i)
    EXPECT_EQ(static_cast<std::int8_t>(codes[i]), ties[i]);
}

}  // namespace
}  // namespace kvcache
