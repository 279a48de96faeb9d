// cpu-tbb takes every GQA group of 1 to 16 query heads per KV head on its vector passes: the
// group's parts (head_groups.hpp) have a width whose passes read the stored rows in place, never
// the portable path's float32 rows, at head_dim 64 and 128. On AVX2 the widths are the parts'
// own (no padded head), on AVX-512 the next power of two.
#include <gtest/gtest.h>

#include <bit>
#include <set>
#include <string>
#include <vector>

#include "attention/head_groups.hpp"
#include "kernels/block_attention.hpp"
#include "kernels/cpu_features.hpp"
#include "kernels/row_format.hpp"

namespace kvcache::cpu {
namespace {

TEST(HeadGroups, EveryGroupUpTo16TakesTheVectorPasses) {
  const VectorIsa isa = vector_isa();
  if (isa == VectorIsa::portable) GTEST_SKIP() << "this CPU has no vector passes (portable)";
  // The kinds the family reads in place: AVX-512's integer ones need VNNI.
  std::vector<RowFormat> kinds = {RowFormat::float16, RowFormat::bfloat16, RowFormat::fp8};
  if (isa == VectorIsa::avx2 || has_vnni())
    kinds.insert(kinds.end(), {RowFormat::int8, RowFormat::int4_g32, RowFormat::int4_g64});
  for (const std::uint32_t dim : {64u, 128u})
    for (std::uint32_t group = 1; group <= 16; ++group) {
      const HeadGroups heads(group, dim, isa);
      SCOPED_TRACE("group " + std::to_string(group) + ", head_dim " + std::to_string(dim));
      EXPECT_LE(heads.width, kMaxGroup);
      EXPECT_EQ(heads.width,
                isa == VectorIsa::avx2 ? heads.per_part : std::bit_ceil(heads.per_part));
      // Every query head of the KV head once, through the real heads of the parts.
      std::multiset<std::uint32_t> seen;
      for (std::uint32_t part = 0; part < heads.parts; ++part)
        for (std::uint32_t g = 0; g < heads.count(part); ++g)
          seen.insert(heads.query_head(part, g));
      EXPECT_EQ(seen.size(), group);
      EXPECT_EQ(std::set<std::uint32_t>(seen.begin(), seen.end()).size(), group);
      for (const RowFormat kind : kinds) {
        const BlockAttention kernels(heads.width, dim, kind, kind);
        EXPECT_EQ(kernels.keys(), kind) << "keys of kind " << static_cast<int>(kind);
        EXPECT_EQ(kernels.values(), kind) << "values of kind " << static_cast<int>(kind);
      }
    }
}

}  // namespace
}  // namespace kvcache::cpu
