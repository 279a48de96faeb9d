// The prefix cache of every backend's store: published pages are shared by a match, cached when
// released and reclaimed under pressure; and pages that travel (the remote tier) export from one
// store and import into another byte for byte; a window's pages serve a prefix without the pages
// behind it.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "store_fixture.hpp"

namespace kvcache::conformance {
namespace {

using ::testing::HasSubstr;

class PrefixConformance : public StoreConformance {};

TEST_P(PrefixConformance, PrefixPagesAreSharedCachedAndReclaimed) {
  KVCACHE_OPEN_STORE_OR_SKIP(store, GetParam().backend, spec(16));
  const std::uint32_t p = GetParam().page_size;
  std::map<SeqId, Shadow> shadows;
  const SeqId a = store->create_sequence();
  step(*store, shadows, {a}, {2 * p + 3});
  std::vector<std::int32_t> ids;
  for (const Token& t : shadows[a].tokens) ids.push_back(t.id);
  store->publish_prefix(a, ids);

  const SeqId b = store->create_sequence();
  EXPECT_EQ(store->match_prefix(b, ids), 2u * p);  // full pages only
  for (Position pos = 0; pos < static_cast<Position>(2 * p); ++pos)
    shadows[b].tokens.push_back({token_id(0, pos), pos});
  shadows[b].next_position = 2 * p;
  const auto pages_a = store->page_table(std::vector<SeqId>{a}).indices;
  EXPECT_EQ(store->page_table(std::vector<SeqId>{b}).indices,
            std::vector<std::int32_t>(pages_a.begin(), pages_a.begin() + 2));
  step(*store, shadows, {b}, {1});
  check_contents(*store, b, shadows[b]);
  check_invariants(*store, shadows);

  store->release(a);
  store->release(b);
  shadows.clear();
  EXPECT_EQ(store->stats().cached_pages, 2u);  // released but kept for reuse
  {  // reclaiming one cached page takes the leaf of the chain: the root still matches
    std::vector<std::int32_t> longer(ids);
    const SeqId probe = store->create_sequence();
    store->evict_cached(1);
    EXPECT_EQ(store->match_prefix(probe, longer), p);
    store->release(probe);
    const SeqId again = store->create_sequence();
    EXPECT_EQ(store->match_prefix(again, longer), p);
    store->release(again);
    // Put the evicted leaf back so the rest of this test sees two cached pages.
    const SeqId refill = store->create_sequence();
    shadows[refill];
    step(*store, shadows, {refill}, {2 * p});
    store->publish_prefix(refill, std::vector<std::int32_t>(ids.begin(), ids.begin() + 2 * p));
    store->release(refill);
    shadows.clear();
    ASSERT_EQ(store->stats().cached_pages, 2u);
  }
  const SeqId c = store->create_sequence();
  shadows[c];
  EXPECT_EQ(store->match_prefix(c, std::vector<std::int32_t>(ids.begin(), ids.begin() + p + 1)), p);
  EXPECT_EQ(store->stats().cached_pages, 1u);
  std::vector<std::int32_t> other(ids);
  other[p] += 1;  // differs in the second page
  const SeqId d = store->create_sequence();
  shadows[d];
  EXPECT_EQ(store->match_prefix(d, other), p);
  store->release(c);
  store->release(d);
  EXPECT_EQ(store->evict_cached(10), 2u);
  const StoreStats st = store->stats();
  EXPECT_EQ(st.free_pages, st.total_pages);
}

// Pages that travel (the remote tier, docs/remote-tier.md): the pages of a published prefix,
// exported from one store and imported into another of the same spec, are cached and published
// there: a match attaches them with the same bytes and positions. lookup_prefix says what a match
// would reuse and attaches nothing; an import of a page held already, or with every page in use,
// or of an image of the wrong size, changes nothing. A store without pages that travel says so.
// A windowed layer group's store (docs/cache.md, "Prefix reuse with layer groups"): pages that a
// window leaves behind go through drop_unseen, after which the sequence still publishes; and a
// later sequence takes only the pages its window needs.
TEST_P(PrefixConformance, AWindowsPagesServeAPrefixWithoutThePagesBehindIt) {
  KVCACHE_OPEN_STORE_OR_SKIP(store, GetParam().backend, spec(16));
  if (groups_tokens()) GTEST_SKIP() << "a format whose scales span tokens drops nothing";
  const std::uint32_t p = GetParam().page_size;
  const auto at = [&](std::uint32_t pages) { return static_cast<Position>(pages * p); };
  std::map<SeqId, Shadow> shadows;
  const SeqId a = store->create_sequence();
  step(*store, shadows, {a}, {4 * p});
  std::vector<std::int32_t> ids;
  for (const Token& t : shadows[a].tokens) ids.push_back(t.id);
  ASSERT_EQ(store->drop_unseen(a, std::vector<PositionRange>{{0, at(2)}}), 2u * p);
  std::erase_if(shadows[a].tokens, [&](const Token& t) { return t.pos < at(2); });
  store->publish_prefix(a, ids);
  EXPECT_EQ(store->prefix_pages(ids), (std::vector<std::uint8_t>{0, 0, 1, 1}));
  EXPECT_EQ(store->lookup_prefix(ids), 0u);  // the run from position 0 is gone

  const SeqId b = store->create_sequence();
  ASSERT_TRUE(store->attach_prefix(b, ids, std::vector<std::uint64_t>{2, 3}));
  Shadow& sb = shadows[b];
  sb.tokens = shadows[a].tokens;
  sb.next_position = at(4);
  EXPECT_EQ(store->positions(b).front(), at(2));
  step(*store, shadows, {b}, {1});
  EXPECT_EQ(store->positions(b).back(), at(4));
  check_contents(*store, b, shadows[b]);

  const SeqId c = store->create_sequence();
  shadows[c];
  EXPECT_FALSE(store->attach_prefix(c, ids, std::vector<std::uint64_t>{1, 2}))
      << "page 1 is not cached";
  EXPECT_EQ(store->length(c), 0u);
  check_invariants(*store, shadows);

  // An eviction's drop: the tokens after the dropped ones were computed without them.
  const SeqId d = store->create_sequence();
  shadows[d].group = 1;
  step(*store, shadows, {d}, {2 * p});
  std::vector<std::int32_t> ids_d;
  for (const Token& t : shadows[d].tokens) ids_d.push_back(t.id);
  store->drop(d, std::vector<PositionRange>{{0, at(1)}});
  EXPECT_THROW(store->publish_prefix(d, ids_d), Error);
}

TEST_P(PrefixConformance, PublishedPagesTravelByteForByte) {
  KVCACHE_OPEN_STORE_OR_SKIP(from, GetParam().backend, spec(8));
  KVCACHE_OPEN_STORE_OR_SKIP(to, GetParam().backend, spec(4));
  const std::uint32_t p = GetParam().page_size;
  std::map<SeqId, Shadow> shadows;
  const SeqId a = from->create_sequence();
  step(*from, shadows, {a}, {3 * p + 1});
  std::vector<std::int32_t> ids;
  for (const Token& t : shadows[a].tokens) ids.push_back(t.id);
  from->publish_prefix(a, ids);
  const StoreStats before_lookup = from->stats();
  EXPECT_EQ(from->lookup_prefix(ids), 3u * p);
  EXPECT_EQ(from->lookup_prefix(std::vector<std::int32_t>(ids.begin(), ids.begin() + 2 * p + 1)),
            2u * p);
  EXPECT_EQ(from->stats().used_pages, before_lookup.used_pages) << "a lookup attached pages";

  const std::vector<std::int32_t> pages = from->page_table(std::vector<SeqId>{a}).indices;
  std::vector<std::vector<std::byte>> images(
      3, std::vector<std::byte>(page_image_bytes(from->info(), spec(1).model)));
  try {
    from->export_page(static_cast<std::uint32_t>(pages[0]), images[0]);
  } catch (const Error& e) {
    ASSERT_EQ(e.code(), Code::unsupported) << e.what();
    EXPECT_THROW(to->import_page(std::span(ids).first(p), images[0]), Error);
    GTEST_SKIP() << "no pages that travel: " << e.what();
  }
  for (std::size_t i = 1; i < 3; ++i)
    from->export_page(static_cast<std::uint32_t>(pages[i]), images[i]);
  const auto first = [&](std::size_t n) { return std::span<const std::int32_t>(ids).first(n); };
  EXPECT_THROW(to->import_page(first(p), std::span(images[0]).first(images[0].size() - 1)), Error)
      << "an image one byte short";
  EXPECT_EQ(to->import_page(first(p), images[0]), PageImport::imported);
  EXPECT_EQ(to->import_page(first(2 * p), images[1]), PageImport::imported);
  EXPECT_EQ(to->import_page(first(p), images[0]), PageImport::present);
  EXPECT_EQ(to->stats().cached_pages, 2u);
  EXPECT_EQ(to->lookup_prefix(ids), 2u * p);
  // The second page of a prompt whose first differs is another page (the chain of hashes).
  std::vector<std::int32_t> other(ids.begin(), ids.begin() + 2 * p);
  other[0] += 1;
  EXPECT_EQ(to->import_page(other, images[1]), PageImport::imported);
  EXPECT_EQ(to->lookup_prefix(other), 0u) << "its first page is not held";
  EXPECT_EQ(to->lookup_prefix(ids), 2u * p);
  EXPECT_EQ(to->import_page(first(2 * p), images[1]), PageImport::present);

  std::map<SeqId, Shadow> there;
  const SeqId b = to->create_sequence();
  ASSERT_EQ(to->match_prefix(b, ids), 2u * p);
  for (Position pos = 0; pos < static_cast<Position>(2 * p); ++pos)
    there[b].tokens.push_back({token_id(0, pos), pos});
  there[b].next_position = 2 * p;
  const std::vector<std::int32_t> imported = to->page_table(std::vector<SeqId>{b}).indices;
  for (std::size_t i = 0; i < 2; ++i)
    for (std::uint32_t layer = 0; layer < kLayers; ++layer)
      for (std::uint32_t h = 0; h < kHeads; ++h)
        for (const bool value : {false, true})
          ASSERT_EQ(to->read_tile(static_cast<std::uint32_t>(imported[i]), layer, h, value),
                    from->read_tile(static_cast<std::uint32_t>(pages[i]), layer, h, value))
              << "page " << i << " layer " << layer << " head " << h << (value ? " V" : " K");
  check_contents(*to, b, there[b]);
  step(*to, there, {b}, {1});  // the imported pages serve as any prefix does
  check_contents(*to, b, there[b]);

  const SeqId c = to->create_sequence();  // takes the last page: none free or cached
  there[c];
  step(*to, there, {c}, {1});
  const StoreStats full = to->stats();
  EXPECT_EQ(to->import_page(first(3 * p), images[2]), PageImport::no_room);
  EXPECT_EQ(to->stats().used_pages, full.used_pages);
  EXPECT_EQ(to->stats().free_pages, 0u);
  EXPECT_EQ(to->lookup_prefix(ids), 2u * p);
  check_invariants(*to, there);
}

INSTANTIATE_TEST_SUITE_P(Backends, PrefixConformance, ::testing::ValuesIn(store_cases()),
                         case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PrefixConformance);

}  // namespace
}  // namespace kvcache::conformance
