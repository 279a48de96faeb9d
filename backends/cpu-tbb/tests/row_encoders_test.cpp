// cpu-tbb's AVX2 row encoders write exactly the reference's codes and scales, on rows chosen to
// catch a lane that rounds differently: exact ties, values at and past fp16's range, fp16
// subnormals, constant and zero rows, signed zeros, and random rows at several magnitudes.
#include <gtest/gtest.h>

#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "kernels/row_format.hpp"
#include "kvcache/formats.hpp"
#include "store/row_encoders.hpp"

namespace kvcache {
namespace {

bool has_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
}

std::vector<std::vector<float>> rows_for(std::uint32_t d) {
  std::vector<std::vector<float>> rows;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (const float magnitude : {1e-6f, 1e-3f, 1.0f, 37.0f, 1e3f, 6e4f}) {
    for (int r = 0; r < 4; ++r) {
      std::vector<float> row(d);
      for (float& x : row) x = magnitude * normal(rng);
      rows.push_back(row);
    }
  }
  // int8 ties: the largest |x| is 127, so the scale is exactly 1 and k + 0.5 is a tie.
  std::vector<float> ties(d);
  for (std::uint32_t i = 0; i < d; ++i)
    ties[i] = (i % 2 ? -1.0f : 1.0f) * (static_cast<float>(i % 127) + 0.5f);
  ties[0] = 127.0f;
  rows.push_back(ties);
  // int4 ties in every group: minimum 0, maximum 15 (scale exactly 1), then k + 0.5.
  std::vector<float> nibble_ties(d);
  for (std::uint32_t i = 0; i < d; ++i)
    nibble_ties[i] = i % 32 == 0 ? 0.0f : i % 32 == 1 ? 15.0f : static_cast<float>(i % 15) + 0.5f;
  rows.push_back(nibble_ties);
  // fp16's edges: its largest value, what rounds to infinity, subnormals, and below them.
  std::vector<float> edges(d);
  const float edge[] = {65504.0f, 65519.0f, 65520.0f, 1e5f,  -7e4f,  6.1e-5f,  5.96e-8f, 2.9e-8f,
                        1e-9f,    -0.0f,    0.0f,     3e-5f, -1e-6f, 0.33333f, 1.0f / 3, 2049.0f};
  for (std::uint32_t i = 0; i < d; ++i) edges[i] = edge[i % std::size(edge)];
  rows.push_back(edges);
  rows.emplace_back(d, 0.0f);
  rows.emplace_back(d, -0.0f);
  rows.emplace_back(d, 2.5f);  // constant: int4's scale is 0
  return rows;
}

TEST(RowEncoders, Avx2WritesTheReferencesBytes) {
  if (!has_avx2()) GTEST_SKIP() << "this CPU has no AVX2 with FMA and F16C";
  struct Case {
    FormatSpec spec;
    cpu::RowFormat kind;
  };
  const Case cases[] = {{parse_format("fp16"), cpu::RowFormat::float16},
                        {parse_format("int8-per-token"), cpu::RowFormat::int8},
                        {parse_format("int4-group"), cpu::RowFormat::int4_g32},
                        {parse_format("int4-group", {{"group", 64}}), cpu::RowFormat::int4_g64},
                        {parse_format("int4-group", {{"group", 128}}), cpu::RowFormat::int4_g128}};
  int checked = 0;
  for (const auto& [spec, kind] : cases) {
    const std::string name = spec.name();
    for (const std::uint32_t d : {64u, 128u, 256u}) {
      if (spec.kind == FormatKind::int4_group && d % spec.group != 0) continue;
      const cpu::RowEncoder encode = cpu::avx2::row_encoder(kind, d);
      ASSERT_NE(encode, nullptr) << name << " at head_dim " << d;
      const TileLayout layout = format_layout(spec, d, 16);
      const std::size_t code_bytes = layout.slot_code_bytes, meta_bytes = layout.slot_meta_bytes;
      for (const std::vector<float>& row : rows_for(d)) {
        // One byte past the meta: an encoder must not write it.
        std::vector<std::byte> want(code_bytes), want_meta(meta_bytes + 1);
        std::vector<std::byte> got(code_bytes, std::byte{0x5A}), got_meta(meta_bytes + 1);
        reference::encode(spec, row, want.data(), want_meta.data());
        encode(row.data(), d, got.data(), got_meta.data());
        ASSERT_EQ(want, got) << name << " codes at head_dim " << d << ", row[0] " << row[0];
        ASSERT_EQ(want_meta, got_meta)
            << name << " scales at head_dim " << d << ", row[0] " << row[0];
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 100);
}

TEST(RowEncoders, Avx2LeavesOtherRowsToTheReference) {
  EXPECT_EQ(cpu::avx2::row_encoder(cpu::RowFormat::bfloat16, 128), nullptr);
  EXPECT_EQ(cpu::avx2::row_encoder(cpu::RowFormat::fp8, 128), nullptr);
  EXPECT_EQ(cpu::avx2::row_encoder(cpu::RowFormat::float16, 36), nullptr);  // not a multiple of 8
  EXPECT_EQ(cpu::avx2::row_encoder(cpu::RowFormat::int4_g128, 64), nullptr);
}

}  // namespace
}  // namespace kvcache
