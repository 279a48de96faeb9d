// The in-tree masks, loaded through the real loader, against dense definitions.
#include <functional>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvcache/registry.hpp"

namespace kvcache {
namespace {

using ::testing::HasSubstr;

const Registry& registry() {
  static const auto r = Registry::load(PluginSettings{});  // finds the plugins next to libkvcache
  return *r;
}

// Expands the ranges of query q into a dense row of length q + 1.
std::vector<bool> row(const AttentionMask& mask, Position q) {
  const std::uint32_t max = mask.describe().max_ranges;
  std::vector<PositionRange> ranges(max);
  std::vector<std::uint32_t> counts(1);
  const std::vector<Position> queries{q};
  mask.visible(queries, ranges, counts);
  std::vector<bool> dense(static_cast<std::size_t>(q + 1), false);
  Position previous_end = -1;
  for (std::uint32_t i = 0; i < counts[0]; ++i) {
    EXPECT_FALSE(ranges[i].empty()) << "q=" << q;
    EXPECT_GT(ranges[i].begin, previous_end) << "ranges must be ascending and disjoint";
    EXPECT_GE(ranges[i].begin, 0);
    EXPECT_LE(ranges[i].end, q + 1) << "masks stay causal";
    previous_end = ranges[i].end;
    for (Position k = ranges[i].begin; k < ranges[i].end; ++k) dense[k] = true;
  }
  return dense;
}

void expect_matches(const AttentionMask& mask,
                    const std::function<bool(Position, Position)>& rule) {
  for (Position q = 0; q < 70; ++q) {
    const std::vector<bool> dense = row(mask, q);
    for (Position k = 0; k <= q; ++k) EXPECT_EQ(dense[k], rule(q, k)) << "q=" << q << " k=" << k;
  }
}

TEST(Masks, Causal) {
  const auto mask = registry().create_mask("causal");
  EXPECT_EQ(mask->describe().kind, MaskKind::causal);
  expect_matches(*mask, [](Position, Position) { return true; });
}

TEST(Masks, SlidingWindow) {
  const auto mask = registry().create_mask("sliding-window", {{"window", 8}});
  EXPECT_EQ(mask->describe().kind, MaskKind::sliding_window);
  EXPECT_EQ(mask->describe().window, 8);
  expect_matches(*mask, [](Position q, Position k) { return q - k < 8; });
}

TEST(Masks, SinkWindowStaysCausalUnlikeTheSeed) {
  const auto mask = registry().create_mask("sink-window", {{"sinks", 4}, {"window", 8}});
  const MaskDescription d = mask->describe();
  EXPECT_EQ(d.kind, MaskKind::sink_window);
  EXPECT_EQ(d.sinks, 4);
  EXPECT_EQ(d.max_ranges, 2u);
  expect_matches(*mask, [](Position q, Position k) { return k < 4 || q - k < 8; });
  // Query 1 sees positions 0 and 1 only, not the later sinks 2 and 3.
  EXPECT_EQ(row(*mask, 1), (std::vector<bool>{true, true}));
}

TEST(Masks, SinkWindowWithoutSinksIsASlidingWindow) {
  const auto mask = registry().create_mask("sink-window", {{"sinks", 0}, {"window", 5}});
  expect_matches(*mask, [](Position q, Position k) { return q - k < 5; });
}

TEST(Masks, Chunked) {
  const auto mask = registry().create_mask("chunked", {{"chunk", 16}});
  EXPECT_EQ(mask->describe().kind, MaskKind::chunked);
  expect_matches(*mask, [](Position q, Position k) { return k / 16 == q / 16; });
}

TEST(Masks, BlockLocalIsKnownOnlyThroughItsRanges) {
  const auto mask = registry().create_mask("block-local", {{"block", 8}});
  EXPECT_EQ(mask->describe().kind, MaskKind::custom);
  expect_matches(*mask, [](Position q, Position k) { return k / 8 >= q / 8 - 1; });
}

TEST(Masks, BatchedQueriesUseTheirOwnSlots) {
  const auto mask = registry().create_mask("sink-window", {{"sinks", 2}, {"window", 3}});
  const std::vector<Position> queries{0, 10, 3};
  std::vector<PositionRange> ranges(6);
  std::vector<std::uint32_t> counts(3);
  mask->visible(queries, ranges, counts);
  EXPECT_EQ(counts, (std::vector<std::uint32_t>{1, 2, 1}));
  EXPECT_EQ(ranges[0], (PositionRange{0, 1}));
  EXPECT_EQ(ranges[2], (PositionRange{0, 2}));
  EXPECT_EQ(ranges[3], (PositionRange{8, 11}));
  EXPECT_EQ(ranges[4], (PositionRange{0, 4}));
}

TEST(Masks, OptionsAreValidated) {
  try {
    registry().create_mask("sliding-window", {{"windw", 8}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::invalid_argument);
    EXPECT_THAT(e.what(), HasSubstr("unknown option 'windw' (did you mean 'window'?)"));
  }
  EXPECT_THROW(registry().create_mask("sliding-window", {{"window", 0}}), Error);
  EXPECT_THROW(registry().create_mask("sliding-window"), Error);  // window is required
  EXPECT_THROW(registry().create_mask("causal", {{"window", 4}}), Error);
  EXPECT_THROW(registry().create_mask("chunked", {{"chunk", "big"}}), Error);
}

TEST(Masks, NegativeQueryPositionIsAnError) {
  const auto mask = registry().create_mask("causal");
  const std::vector<Position> q{-1};
  std::vector<PositionRange> r(1);
  std::vector<std::uint32_t> c(1);
  EXPECT_THROW(mask->visible(q, r, c), Error);
}

}  // namespace
}  // namespace kvcache
