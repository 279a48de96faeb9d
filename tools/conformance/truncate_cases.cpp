// CacheStore::truncate on every backend: a sequence rolled back inside a page, at a page
// boundary, through a page shared with a fork, below a published prefix, to nothing, and past its
// length (refused, nothing changed). After each, new tokens are appended (other rows than those
// rolled back) and the store must hold exactly what appending them alone gives, byte for byte
// against the reference, while the fork's and the prefix's pages keep what they held.
#include <map>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "store_fixture.hpp"

namespace kvcache::conformance {
namespace {

using ::testing::HasSubstr;

class TruncateConformance : public StoreConformance {
 protected:
  // The shadow of a truncate to `keep` tokens; later tokens of `s` come from another group, so
  // their rows differ from the ones rolled back.
  static void cut(Shadow& s, std::size_t keep) {
    if (keep < s.tokens.size()) s.next_position = s.tokens[keep].pos;
    s.tokens.resize(keep);
    s.group += 3;
  }
  // Whether a truncate of `s` to `keep` would reopen a group of tokens older than the one its
  // format encoded last, which the store refuses.
  bool reopens_an_old_group(const Shadow& s, std::uint64_t keep) const {
    for (const bool value : {false, true}) {
      const FormatSpec f = format(value);
      if (f.groups_tokens() && keep % f.group != 0 &&
          keep / f.group + 1 < s.tokens.size() / f.group)
        return true;
    }
    return false;
  }
  // Truncates and checks, then appends `more` tokens and checks again. A truncate the format
  // refuses must change nothing.
  void truncate_then_append(CacheStore& store, std::map<SeqId, Shadow>& shadows, SeqId id,
                            std::uint64_t keep, std::uint32_t more) {
    if (reopens_an_old_group(shadows[id], keep)) {
      try {
        store.truncate(id, keep);
        ADD_FAILURE() << "a group older than the last encoded one was reopened";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), Code::unsupported) << e.what();
      }
      check_contents(store, id, shadows[id]);
      check_invariants(store, shadows);
      return;
    }
    store.truncate(id, keep);
    cut(shadows[id], keep);
    check_contents(store, id, shadows[id]);
    check_invariants(store, shadows);
    step(store, shadows, {id}, {more});
    check_contents(store, id, shadows[id]);
    check_invariants(store, shadows);
  }
};

TEST_P(TruncateConformance, InsideAPage) {
  KVCACHE_OPEN_STORE_OR_SKIP(store, GetParam().backend, spec(8));
  const std::uint32_t p = GetParam().page_size;
  std::map<SeqId, Shadow> shadows;
  const SeqId a = store->create_sequence();
  step(*store, shadows, {a}, {p + 3});
  const StoreStats before = store->stats();
  truncate_then_append(*store, shadows, a, p + 1, 2);
  EXPECT_EQ(store->stats().used_pages, before.used_pages);
}

TEST_P(TruncateConformance, AtAPageBoundaryGivesPagesBack) {
  KVCACHE_OPEN_STORE_OR_SKIP(store, GetParam().backend, spec(8));
  const std::uint32_t p = GetParam().page_size;
  std::map<SeqId, Shadow> shadows;
  const SeqId a = store->create_sequence();
  step(*store, shadows, {a}, {p});
  const StoreStats one_page = store->stats();
  step(*store, shadows, {a}, {2 * p + 1});
  store->truncate(a, p);
  cut(shadows[a], p);
  EXPECT_EQ(store->stats().free_pages, one_page.free_pages) << "the pages past it went back";
  check_contents(*store, a, shadows[a]);
  step(*store, shadows, {a}, {p + 2});
  check_contents(*store, a, shadows[a]);
  check_invariants(*store, shadows);
}

TEST_P(TruncateConformance, ThroughAPageSharedWithAFork) {
  KVCACHE_OPEN_STORE_OR_SKIP(store, GetParam().backend, spec(8));
  const std::uint32_t p = GetParam().page_size;
  std::map<SeqId, Shadow> shadows;
  const SeqId a = store->create_sequence();
  step(*store, shadows, {a}, {p + p / 2 + 1});
  const SeqId b = store->fork(a);
  shadows[b] = shadows[a];
  truncate_then_append(*store, shadows, a, p + 1, p);  // into the shared second page
  check_contents(*store, b, shadows[b]);               // the fork's page was not written through
  truncate_then_append(*store, shadows, b, p - 1, 3);  // into the shared first page
  check_contents(*store, a, shadows[a]);
}

TEST_P(TruncateConformance, BelowAPublishedPrefix) {
  if (!spec(8).prefix_caching) GTEST_SKIP() << "no prefix cache";
  KVCACHE_OPEN_STORE_OR_SKIP(store, GetParam().backend, spec(12));
  const std::uint32_t p = GetParam().page_size;
  std::map<SeqId, Shadow> shadows;
  const SeqId a = store->create_sequence();
  step(*store, shadows, {a}, {2 * p + 2});
  std::vector<std::int32_t> prompt;
  for (const Token& t : shadows[a].tokens) prompt.push_back(t.id);
  store->publish_prefix(a, prompt);
  const Shadow published = shadows[a];
  truncate_then_append(*store, shadows, a, p + 1, p);  // into the second published page
  // The published pages still hold the prompt: a new sequence matches and reads them.
  const SeqId c = store->create_sequence();
  EXPECT_EQ(store->match_prefix(c, prompt), 2 * p);
  shadows[c] = published;
  shadows[c].tokens.resize(2 * p);
  shadows[c].next_position = static_cast<Position>(2 * p);
  check_contents(*store, c, shadows[c]);
  check_invariants(*store, shadows);
}

TEST_P(TruncateConformance, ToNothing) {
  KVCACHE_OPEN_STORE_OR_SKIP(store, GetParam().backend, spec(8));
  const std::uint32_t p = GetParam().page_size;
  std::map<SeqId, Shadow> shadows;
  const SeqId a = store->create_sequence();
  const StoreStats empty = store->stats();
  step(*store, shadows, {a}, {2 * p + 1});
  store->truncate(a, 0);
  cut(shadows[a], 0);
  EXPECT_EQ(store->length(a), 0u);
  EXPECT_EQ(store->stats().free_pages, empty.free_pages);
  step(*store, shadows, {a}, {p + 1});
  EXPECT_EQ(store->positions(a).front(), 0) << "positions start again";
  check_contents(*store, a, shadows[a]);
  check_invariants(*store, shadows);
}

TEST_P(TruncateConformance, PastTheLengthChangesNothing) {
  KVCACHE_OPEN_STORE_OR_SKIP(store, GetParam().backend, spec(8));
  const std::uint32_t p = GetParam().page_size;
  std::map<SeqId, Shadow> shadows;
  const SeqId a = store->create_sequence();
  step(*store, shadows, {a}, {p + 2});
  const StoreStats before = store->stats();
  try {
    store->truncate(a, p + 3);
    FAIL() << "a sequence of " << p + 2 << " tokens was truncated to " << p + 3;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::invalid_argument);
    EXPECT_THAT(e.what(), HasSubstr("it holds " + std::to_string(p + 2)));
  }
  EXPECT_EQ(store->stats().free_pages, before.free_pages);
  check_contents(*store, a, shadows[a]);
  store->truncate(a, p + 2);  // to its own length: nothing to do
  check_contents(*store, a, shadows[a]);
  step(*store, shadows, {a}, {1});
  check_contents(*store, a, shadows[a]);
}

// A format that groups tokens (kivi-k) reopens the group it encoded last from the rows it kept,
// and refuses, changing nothing, to reopen an older one. Other formats cut anywhere.
TEST_P(TruncateConformance, IntoAnEncodedGroup) {
  KVCACHE_OPEN_STORE_OR_SKIP(store, GetParam().backend, spec(8));
  const FormatSpec k = format(false), v = format(true);
  const std::uint32_t g = k.groups_tokens() ? k.group : v.groups_tokens() ? v.group : 4;
  std::map<SeqId, Shadow> shadows;
  const SeqId a = store->create_sequence();
  step(*store, shadows, {a}, {3 * g + 1});
  truncate_then_append(*store, shadows, a, 2 * g + 1, g);  // into the last encoded group
  if (!groups_tokens()) {
    truncate_then_append(*store, shadows, a, 1, g);
    return;
  }
  try {
    store->truncate(a, 1);  // two groups back
    FAIL() << "a group two back was reopened";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::unsupported);
    EXPECT_THAT(e.what(), HasSubstr("has already encoded the group of tokens 0.."));
  }
  check_contents(*store, a, shadows[a]);
  truncate_then_append(*store, shadows, a, 3 * g, 2);  // a group boundary is always fine
}

INSTANTIATE_TEST_SUITE_P(Backends, TruncateConformance, ::testing::ValuesIn(store_cases()),
                         case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TruncateConformance);

}  // namespace
}  // namespace kvcache::conformance
