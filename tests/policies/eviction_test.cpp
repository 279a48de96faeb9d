// Each eviction policy's decisions on hand-built scenarios, loaded through the real loader.
#include <map>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvcache/registry.hpp"

namespace kvcache {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const Registry& registry() {
  static const auto r = Registry::load(PluginSettings{});
  return *r;
}

// Per-token detail for hand-built sequences.
class Tokens final : public TokenSource {
 public:
  TokenDetail tokens(SeqId id) const override {
    const auto& t = by_sequence.at(id);
    return {t.first, t.second};
  }
  std::map<SeqId, std::pair<std::vector<Position>, std::vector<float>>> by_sequence;
};

//                       id tokens pages prio created last_used next_position
const std::vector<SequenceState> kFour = {{1, 40, 3, 50, 4, 9, 40},
                                          {2, 20, 2, 10, 2, 8, 20},
                                          {3, 70, 5, 90, 1, 3, 70},
                                          {4, 10, 1, 10, 3, 5, 10}};

CacheState state_of(const std::vector<SequenceState>& sequences,
                    const TokenSource* tokens = nullptr) {
  return {16, 10, 100, 0, 0, sequences, tokens};
}

TEST(Eviction, OldestFirstPreemptsByCreationUntilEnoughPages) {
  const auto p = registry().create_eviction("oldest-first");
  EXPECT_FALSE(p->wants_scores());
  EXPECT_EQ(p->drops_tokens(), false);  // only preempts: fine with kivi-k
  EXPECT_TRUE(p->after_step(state_of(kFour)).empty());
  EXPECT_THAT(p->on_pressure(state_of(kFour), 5).preempt, ElementsAre(3));     // 5 pages
  EXPECT_THAT(p->on_pressure(state_of(kFour), 6).preempt, ElementsAre(3, 2));  // 5 + 2
}

TEST(Eviction, LruPreemptsTheLeastRecentlyUsed) {
  const auto p = registry().create_eviction("lru");
  EXPECT_THAT(p->on_pressure(state_of(kFour), 6).preempt, ElementsAre(3, 4));
}

TEST(Eviction, PriorityPreemptsLowestFirstTiesByLru) {
  const auto p = registry().create_eviction("priority");
  // Sequences 2 and 4 share priority 10; 4 was used less recently.
  EXPECT_THAT(p->on_pressure(state_of(kFour), 3).preempt, ElementsAre(4, 2));
  EXPECT_THAT(p->on_pressure(state_of(kFour), 4).preempt, ElementsAre(4, 2, 1));
}

TEST(Eviction, StreamingDropsWhatNoFutureQueryCanSeeAPageAtATime) {
  const auto p = registry().create_eviction("streaming", {{"sinks", 4}, {"window", 32}});
  Tokens tokens;
  std::vector<Position> all(60);
  for (Position i = 0; i < 60; ++i) all[i] = i;
  tokens.by_sequence[7] = {all, {}};
  std::vector<Position> few(all.begin(), all.begin() + 45);
  tokens.by_sequence[8] = {few, {}};
  const std::vector<SequenceState> s = {{7, 60, 4, 50, 0, 0, 60}, {8, 45, 3, 50, 0, 0, 45}};
  const EvictionPlan plan = p->after_step(state_of(s, &tokens));
  // Sequence 7: the next query (position 60) sees [0, 4) and [29, 60]: 25 tokens can go.
  // Sequence 8: only 10 could go, less than a page: it waits.
  ASSERT_EQ(plan.drop.size(), 1u);
  EXPECT_EQ(plan.drop[0], (DroppedRange{7, {4, 29}}));
  EXPECT_THAT(p->on_pressure(state_of(kFour), 1).preempt, ElementsAre(3));
}

TEST(Eviction, HeavyHitterKeepsSinksRecentAndTheHeaviest) {
  const auto p =
      registry().create_eviction("heavy-hitter", {{"budget", 8}, {"sinks", 2}, {"recent", 3}});
  EXPECT_TRUE(p->wants_scores());
  EXPECT_EQ(p->drops_tokens(), true);
  Tokens tokens;
  std::vector<Position> positions;
  std::vector<float> scores;
  for (Position i = 0; i < 30; ++i) {
    positions.push_back(i);
    scores.push_back(i == 10 || i == 11 || i == 20 ? 5.0f : 0.1f);  // three heavy hitters
  }
  tokens.by_sequence[1] = {positions, scores};
  const std::vector<SequenceState> s = {{1, 30, 2, 50, 0, 0, 30}};
  EvictionPlan plan = p->after_step({4, 10, 100, 0, 0, s, &tokens});  // page size 4
  // Kept: sinks 0-1, heavy 10, 11, 20, recent 27-29 = 8 tokens.
  std::vector<DroppedRange> want = {{1, {2, 10}}, {1, {12, 20}}, {1, {21, 27}}};
  EXPECT_EQ(plan.drop, want);
  // Within budget plus a page of slack: nothing to do.
  const std::vector<SequenceState> small = {{1, 11, 1, 50, 0, 0, 11}};
  EXPECT_TRUE(p->after_step({4, 10, 100, 0, 0, small, &tokens}).empty());
}

TEST(Eviction, OptionsAreValidated) {
  try {
    registry().create_eviction("streaming", {{"windw", 4}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("unknown option 'windw' (did you mean 'window'?)"));
  }
  EXPECT_THROW(
      registry().create_eviction("heavy-hitter", {{"budget", 4}, {"sinks", 4}, {"recent", 4}}),
      Error);
  EXPECT_THROW(registry().create_eviction("oldest-first", {{"sinks", 4}}), Error);
}

}  // namespace
}  // namespace kvcache
