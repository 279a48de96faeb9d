// The paging library's parts on their own, without a store or a backend: PagePool's counts and
// LRU, PrefixIndex's chain and its guard against collisions, PageBook's reserve, fork, drop and
// truncate bookkeeping, and a step's plan (slot spans, and the checks that make a plan stale).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "kvcache/formats.hpp"
#include "kvcache/paging/attention_plan.hpp"
#include "kvcache/paging/page_book.hpp"
#include "kvcache/paging/page_pool.hpp"
#include "kvcache/paging/prefix_index.hpp"
#include "kvcache/status.hpp"

namespace kvcache::paging {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(PagePool, CountsFreeUsedAndCachedPages) {
  PagePool pool(4);
  EXPECT_EQ(pool.free_count(), 4u);
  const PageId a = pool.allocate(), b = pool.allocate();
  EXPECT_NE(a, b);
  EXPECT_EQ(pool.used_count(), 2u);
  pool.retain(a);
  EXPECT_EQ(pool.refs(a), 2u);
  pool.release(a, true);  // one reference left: still used
  EXPECT_FALSE(pool.cached(a));
  pool.release(a, true);
  pool.release(b, false);
  EXPECT_TRUE(pool.cached(a));
  EXPECT_FALSE(pool.cached(b));
  EXPECT_EQ(pool.cached_count(), 1u);
  EXPECT_EQ(pool.free_count(), 3u);
  EXPECT_EQ(pool.used_count(), 0u);
}

TEST(PagePool, EvictsTheLeastRecentlyCachedAndARetainedPageLeavesTheList) {
  PagePool pool(3);
  const PageId a = pool.allocate(), b = pool.allocate(), c = pool.allocate();
  for (const PageId p : {a, b, c}) pool.release(p, true);  // cached in the order a, b, c
  pool.retain(a);                                          // back in use: not evictable
  EXPECT_EQ(pool.cached_count(), 2u);
  EXPECT_EQ(pool.evict_oldest_cached(), b);
  pool.release(a, true);  // now the most recent
  EXPECT_EQ(pool.evict_oldest_cached(), c);
  EXPECT_EQ(pool.evict_oldest_cached(), a);
  EXPECT_EQ(pool.free_count(), 3u);
}

TEST(PrefixIndex, TheChainCoversTheTokensAndTheParent) {
  const std::vector<std::int32_t> t = {1, 2, 3, 4}, u = {1, 2, 3, 5};
  EXPECT_EQ(PrefixIndex::chain(0, t), PrefixIndex::chain(0, t));
  EXPECT_NE(PrefixIndex::chain(0, t), PrefixIndex::chain(0, u));
  EXPECT_NE(PrefixIndex::chain(0, t), PrefixIndex::chain(PrefixIndex::chain(0, u), t));
}

TEST(PrefixIndex, FindsOnlyAPageOfTheSameTokensAndParent) {
  PrefixIndex index(4, 4);
  const std::vector<std::int32_t> t = {1, 2, 3, 4}, u = {9, 9, 9, 9};
  const std::uint64_t h = PrefixIndex::chain(0, t);
  index.publish(2, 0, h, t);
  EXPECT_TRUE(index.published(2));
  EXPECT_EQ(index.find(0, h, t), std::optional<PageId>(2));
  // The same hash with other tokens or another parent is a collision, never a hit.
  EXPECT_EQ(index.find(0, h, u), std::nullopt);
  EXPECT_EQ(index.find(7, h, t), std::nullopt);
  index.publish(3, 0, h, t);  // an equal page: the first stays
  EXPECT_EQ(index.find(0, h, t), std::optional<PageId>(2));
  EXPECT_FALSE(index.published(3));
  index.forget(2);
  EXPECT_EQ(index.find(0, h, t), std::nullopt);
}

// Host bytes behind a book, enough to check what the book asks of its memory.
class CountingMemory final : public PageMemory {
 public:
  void poison(PageId, std::uint32_t) override {}
  void copy_page(PageId, PageId) override { ++copies; }
  void move_slots(std::span<const SlotMove> moves) override { moved += moves.size(); }
  int copies = 0;
  std::size_t moved = 0;
};

StoreSpec small_spec(std::uint32_t pages) {
  StoreSpec spec;
  spec.model = {2, 2, 1, 16};
  spec.page_size = 4;
  spec.capacity_bytes = pages * page_cost(spec);
  return spec;
}

TEST(PageBook, AReserveIsAllOrNothing) {
  CountingMemory memory;
  PageBook book(small_spec(3), memory);
  const SeqId a = book.create(), b = book.create();
  const std::vector<SeqId> both = {a, b};
  EXPECT_THROW(book.reserve(both, std::vector<std::uint32_t>{8, 8}), Error);  // 4 pages of 3
  EXPECT_EQ(book.find(a).length, 0u);
  EXPECT_EQ(book.find(b).length, 0u);
  book.reserve(both, std::vector<std::uint32_t>{8, 4});
  EXPECT_EQ(book.find(a).pages.size(), 2u);
  EXPECT_EQ(book.find(b).pages.size(), 1u);
  EXPECT_THAT(book.positions(a), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
}

TEST(PageBook, AForkSharesPagesAndCopiesTheLastOneOnItsNextReserve) {
  CountingMemory memory;
  PageBook book(small_spec(4), memory);
  const SeqId a = book.create();
  book.reserve(std::vector<SeqId>{a}, std::vector<std::uint32_t>{6});
  for (std::uint64_t& w : book.find(a).written) w = 6;  // a fork takes written slots only
  const SeqId b = book.fork(a);
  EXPECT_EQ(book.find(b).pages, book.find(a).pages);
  const std::uint64_t shape = book.find(b).shape;
  book.reserve(std::vector<SeqId>{b}, std::vector<std::uint32_t>{1});  // into the shared page 1
  EXPECT_EQ(memory.copies, 1);
  EXPECT_EQ(book.find(b).pages[0], book.find(a).pages[0]);
  EXPECT_NE(book.find(b).pages[1], book.find(a).pages[1]);
  EXPECT_NE(book.find(b).shape, shape);
}

TEST(PageBook, DropCompactsAndTruncateGivesSlotsBack) {
  CountingMemory memory;
  PageBook book(small_spec(4), memory);
  const SeqId a = book.create();
  book.reserve(std::vector<SeqId>{a}, std::vector<std::uint32_t>{10});
  for (std::uint64_t& w : book.find(a).written) w = 10;
  EXPECT_EQ(book.drop(a, std::vector<PositionRange>{{2, 5}}), 3u);
  EXPECT_THAT(book.positions(a), ElementsAre(0, 1, 5, 6, 7, 8, 9));
  EXPECT_GT(memory.moved, 0u);
  book.truncate(a, 4);
  EXPECT_THAT(book.positions(a), ElementsAre(0, 1, 5, 6));
  EXPECT_EQ(book.find(a).pages.size(), 1u);
}

// A step's plan over a book, with one range per query.
struct Planned {
  std::vector<SeqId> ids;
  std::vector<std::uint32_t> counts;
  std::vector<PositionRange> ranges;
  std::vector<std::uint32_t> range_counts;
  AttentionPlan plan(const PageBook& book) const {
    StepRequest r;
    r.sequences = ids;
    r.query_counts = counts;
    r.visible = {ranges, range_counts, 1, {}};
    return plan_step(book, r);
  }
};

TEST(StepPlan, TurnsPositionRangesIntoSlotSpans) {
  CountingMemory memory;
  PageBook book(small_spec(4), memory);
  const SeqId a = book.create();
  book.reserve(std::vector<SeqId>{a}, std::vector<std::uint32_t>{10});
  for (std::uint64_t& w : book.find(a).written) w = 10;
  book.drop(a, std::vector<PositionRange>{{2, 5}});  // slots hold positions 0 1 5 6 7 8 9
  const Planned p{{a}, {2}, {{0, 6}, {6, 10}}, {1, 1}};
  const AttentionPlan plan = p.plan(book);
  EXPECT_EQ(plan.queries, 2u);
  EXPECT_EQ(plan.written, std::vector<std::uint64_t>{7});
  ASSERT_EQ(plan.visible[0].size(), 1u);
  EXPECT_EQ(plan.visible[0][0].begin, 0u);  // positions 0 1 5
  EXPECT_EQ(plan.visible[0][0].end, 3u);
  EXPECT_EQ(plan.visible[1][0].begin, 3u);  // positions 6 7 8 9
  EXPECT_EQ(plan.visible_slots(1), 4u);
}

TEST(StepPlan, RefusesRequestsThatDoNotFitByName) {
  CountingMemory memory;
  PageBook book(small_spec(4), memory);
  const SeqId a = book.create();
  book.reserve(std::vector<SeqId>{a}, std::vector<std::uint32_t>{3});
  const auto refused = [&](const Planned& p, const char* words) {
    try {
      p.plan(book);
      ADD_FAILURE() << "planned: " << words;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::invalid_argument);
      EXPECT_THAT(e.what(), HasSubstr(words));
    }
  };
  refused({{a}, {4}, {{0, 3}, {0, 3}, {0, 3}, {0, 3}}, {1, 1, 1, 1}}, "only 3 reserved slots");
  refused({{a}, {1, 1}, {{0, 3}}, {1}}, "one query count per sequence");
  refused({{a}, {}, {{2, 1}}, {1}}, "ends before it begins");
}

TEST(StepPlan, ALayerRunsOnlyWhenWrittenAndWhileItsSequencesKeepTheirShape) {
  CountingMemory memory;
  PageBook book(small_spec(4), memory);
  const SeqId a = book.create();
  book.reserve(std::vector<SeqId>{a}, std::vector<std::uint32_t>{3});
  const AttentionPlan plan = Planned{{a}, {}, {{0, 3}}, {1}}.plan(book);
  std::vector<float> q(2 * 16), out(q.size());
  std::int64_t shape[3] = {1, 2, 16};
  DLTensor qt{q.data(), {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, shape, nullptr, 0};
  DLTensor ot = qt;
  ot.data = out.data();
  try {
    check_step_layer(book, plan, 1, qt, ot);
    ADD_FAILURE() << "ran a layer before its append";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("append the layer before its attention"));
  }
  book.find(a).written[1] = 3;
  check_step_layer(book, plan, 1, qt, ot);
  book.reserve(std::vector<SeqId>{a}, std::vector<std::uint32_t>{1});
  try {
    check_step_layer(book, plan, 1, qt, ot);
    ADD_FAILURE() << "ran a stale plan";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("the step's plan is stale"));
  }
}

}  // namespace
}  // namespace kvcache::paging
