// The GPU backends' format code (backends/gpu-common/device_codec.hpp) run on the CPU: it is
// plain code shared by host and device compilers, so this checks, on any machine, that the GPU
// kernels write the reference's bytes and read back the reference's values.
#include "device_codec.hpp"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "device_format.hpp"
#include "kvcache/formats.hpp"
#include "kvcache/numeric.hpp"

namespace kvcache::gpu {
namespace {

std::vector<float> interesting_floats() {
  std::vector<float> v = {0.0f,      -0.0f,         1.0f,          -1.0f,         65504.0f,
                          65519.99f, 65520.0f,      -65520.0f,     1e-8f,         -6e-8f,
                          6.1e-5f,   6.0975552e-5f, 2.9802322e-8f, 448.0f,        447.9f,
                          464.0f,    -500.0f,       0.015625f,     0.0146484375f, 1e30f,
                          INFINITY,  -INFINITY,     3.0517578e-5f, 0.00195312f,   0.0009765625f};
  std::mt19937 rng(5);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    const std::uint32_t b = bits(rng);
    float x;
    std::memcpy(&x, &b, 4);
    if (!std::isnan(x)) v.push_back(x);
  }
  std::normal_distribution<float> normal;
  for (int i = 0; i < 100000; ++i)
    v.push_back(normal(rng) * std::exp2(static_cast<float>(i % 40 - 30)));
  return v;
}

TEST(DeviceCodec, HalfConversionsMatchTheReference) {
  for (const float x : interesting_floats()) {
    ASSERT_EQ(fp16_bits(x), fp16_from_float(x)) << x;
    ASSERT_EQ(bf16_bits(x), bf16_from_float(x)) << x;
  }
  EXPECT_TRUE(std::isnan(fp16_value(fp16_bits(NAN))));
  EXPECT_TRUE(std::isnan(bf16_value(bf16_bits(NAN))));
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto code = static_cast<std::uint16_t>(h);
    const float want = float_from_fp16(code), got = fp16_value(code);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << h;
    } else {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(want)) << h;
    }
    ASSERT_EQ(std::bit_cast<std::uint32_t>(bf16_value(code)),
              std::bit_cast<std::uint32_t>(float_from_bf16(code)));
  }
}

TEST(DeviceCodec, Fp8ConversionsMatchTheReference) {
  for (const float x : interesting_floats()) ASSERT_EQ(fp8_bits(x), fp8_e4m3_from_float(x)) << x;
  EXPECT_EQ(fp8_bits(NAN) & 0x7F, 0x7F);
  for (std::uint32_t c = 0; c < 256; ++c) {
    const auto code = static_cast<std::uint8_t>(c);
    const float want = float_from_fp8_e4m3(code), got = fp8_value(code);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << c;
    } else {
      ASSERT_EQ(got, want) << c;
    }
  }
}

// Every per-row format, several head sizes and data with outlier channels: the tile bytes the
// device encoder writes equal the reference's, and its reader returns the reference's decode.
TEST(DeviceCodec, RowsEncodeAndDecodeLikeTheReference) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal;
  const std::vector<std::pair<std::string, nlohmann::json>> formats = {
      {"fp32", {}},
      {"fp16", {}},
      {"bf16", {}},
      {"fp8-e4m3", {}},
      {"int8-per-token", {}},
      {"int4-group", {{"group", 32}}},
      {"int4-group", {{"group", 64}}},
      {"int4-group", {{"group", 128}}}};
  constexpr std::uint32_t kPage = 16;
  for (const auto& [name, options] : formats) {
    for (const std::uint32_t dim : {16u, 64u, 128u, 256u}) {
      const FormatSpec spec = parse_format(name, options);
      if (spec.kind == FormatKind::int4_group && dim % spec.group != 0) continue;
      const TileLayout layout = format_layout(spec, dim, kPage);
      const DeviceFormat f = device_format(spec, dim, kPage, "test");
      std::vector<std::uint8_t> tile(layout.tile_bytes, 0), want(layout.tile_bytes, 0);
      std::vector<float> x(dim), decoded(dim);
      for (std::uint32_t slot = 0; slot < kPage; ++slot) {
        for (std::uint32_t i = 0; i < dim; ++i)
          x[i] = normal(rng) * (i % 17 == 3 ? 40.0f : 1.0f) + (slot == 5 ? 3.0f : 0.0f);
        if (slot == 7) std::fill(x.begin(), x.end(), 0.0f);  // an all-zero row: no division by 0
        encode_row(f, x.data(), dim, tile.data(), slot);
        auto* w = reinterpret_cast<std::byte*>(want.data());
        reference::encode(spec, x, w + slot_code_offset(layout, slot),
                          w + slot_meta_offset(spec, layout, dim, slot));
      }
      ASSERT_EQ(tile, want) << name << " dim " << dim;
      for (std::uint32_t slot = 0; slot < kPage; ++slot) {
        const auto* t = reinterpret_cast<const std::byte*>(tile.data());
        reference::decode(spec, t + slot_code_offset(layout, slot),
                          t + slot_meta_offset(spec, layout, dim, slot), decoded);
        const SlotReader reader(f, tile.data(), slot);
        for (std::uint32_t i = 0; i < dim; ++i)
          ASSERT_EQ(reader[i], decoded[i]) << name << " dim " << dim << " slot " << slot;
      }
    }
  }
}

// kivi-k: whole groups of tokens with per-channel scales, 4 and 2 bits.
TEST(DeviceCodec, TokenGroupsEncodeAndDecodeLikeTheReference) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  constexpr std::uint32_t kPage = 32;
  for (const std::uint32_t bits : {4u, 2u}) {
    for (const std::uint32_t group : {8u, 16u, 32u}) {
      for (const std::uint32_t dim : {16u, 128u}) {
        const FormatSpec spec = parse_format("kivi-k", {{"group", group}, {"bits", bits}});
        const TileLayout layout = format_layout(spec, dim, kPage);
        const DeviceFormat f = device_format(spec, dim, kPage, "test");
        std::vector<std::uint8_t> tile(layout.tile_bytes, 0), want(layout.tile_bytes, 0);
        std::vector<float> rows(std::size_t{group} * dim), decoded(dim);
        auto* w = reinterpret_cast<std::byte*>(want.data());
        for (std::uint32_t first = 0; first < kPage; first += group) {
          for (std::size_t i = 0; i < rows.size(); ++i)  // as the stores hold them: fp16 values
            rows[i] = float_from_fp16(fp16_from_float(normal(rng) * (i % dim == 3 ? 30.0f : 1.0f)));
          encode_group(f, rows.data(), dim, tile.data(), first);
          reference::encode_group(spec, rows, dim, w + slot_code_offset(layout, first),
                                  w + slot_meta_offset(spec, layout, dim, first));
        }
        ASSERT_EQ(tile, want) << "bits " << bits << " group " << group << " dim " << dim;
        for (std::uint32_t slot = 0; slot < kPage; ++slot) {
          reference::decode(spec, w + slot_code_offset(layout, slot),
                            w + slot_meta_offset(spec, layout, dim, slot), decoded);
          const SlotReader reader(f, tile.data(), slot);
          for (std::uint32_t i = 0; i < dim; ++i) ASSERT_EQ(reader[i], decoded[i]) << slot;
        }
      }
    }
  }
}

TEST(DeviceCodec, LayoutsTheKernelsCannotAddressAreRefused) {
  // One fp16 slot of one element: the page's codes would not fill a 4-byte word.
  EXPECT_THROW(device_format(parse_format("fp16"), 1, 1, "test"), Error);
}

}  // namespace
}  // namespace kvcache::gpu
