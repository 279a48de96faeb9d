#include <array>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "kvcache/nearest_name.hpp"

namespace kvcache {
namespace {

TEST(EditDistance, Basics) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", "abc"), 0u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("page_size", "page_sise"), 1u);  // substitution
  EXPECT_EQ(edit_distance("backend", "backends"), 1u);     // insertion
  EXPECT_EQ(edit_distance("quantizer", "quantier"), 1u);   // deletion
}

TEST(EditDistance, AdjacentTranspositionCostsOne) {
  EXPECT_EQ(edit_distance("ab", "ba"), 1u);
  EXPECT_EQ(edit_distance("page_size", "pgae_size"), 1u);
}

TEST(EditDistance, IgnoresCase) {
  EXPECT_EQ(edit_distance("GiB", "gib"), 0u);
  EXPECT_EQ(edit_distance("Model", "MODLE"), 1u);
}

TEST(EditDistance, IsSymmetric) {
  EXPECT_EQ(edit_distance("int8-per-tokn", "int8-per-token"),
            edit_distance("int8-per-token", "int8-per-tokn"));
}

TEST(NearestName, FindsTheClosestCandidate) {
  const std::vector<std::string> keys = {"page_size", "capacity", "prefix_caching"};
  EXPECT_EQ(nearest_name("page_sise", keys), "page_size");
  EXPECT_EQ(nearest_name("capacty", keys), "capacity");
  const std::array<std::string_view, 3> names = {"int8-per-token", "int4-group", "fp16"};
  EXPECT_EQ(nearest_name("int8-per-tokn", names), "int8-per-token");
}

TEST(NearestName, PrefersTheSmallestDistanceThenTheFirst) {
  EXPECT_EQ(nearest_name("cat", std::vector<std::string>{"cart", "cat"}), "cat");
  EXPECT_EQ(nearest_name("cat", std::vector<std::string>{"bat", "hat"}), "bat");
}

TEST(NearestName, NothingWhenTooFar) {
  const std::vector<std::string> keys = {"model", "backend", "cache"};
  EXPECT_EQ(nearest_name("plugins", keys), std::nullopt);
  EXPECT_EQ(nearest_name("abc", std::vector<std::string>{"xyz"}), std::nullopt);
  EXPECT_EQ(nearest_name("abc", std::vector<std::string>{}), std::nullopt);
}

TEST(NearestName, AllowsAThirdOfTheLongerNameAndAtLeastTwo) {
  EXPECT_EQ(nearest_name("ab", std::vector<std::string>{"xy"}), "xy");  // 2 edits, minimum 2
  // 12 letters allow 4 edits, not 5.
  EXPECT_EQ(nearest_name("abcdefghijkl", std::vector<std::string>{"wxyzefghijkl"}), "wxyzefghijkl");
  EXPECT_EQ(nearest_name("abcdefghijkl", std::vector<std::string>{"vwxyzfghijkl"}), std::nullopt);
}

TEST(DidYouMean, FormatsASuffix) {
  const std::vector<std::string> sections = {"model", "backend", "cache"};
  EXPECT_EQ(did_you_mean("modle", sections), " (did you mean 'model'?)");
  EXPECT_EQ(did_you_mean("zzzzzz", sections), "");
}

}  // namespace
}  // namespace kvcache
