// Every backend's CacheStore against the reference, through the real loader: stored bytes equal
// the reference encoding, a randomized workload keeps every invariant, reserves are
// all-or-nothing, and copy-on-write, compaction and whole-page drops keep contents intact.
// Prefix sharing and pages that travel: prefix_cases.cpp; truncate: truncate_cases.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "store_fixture.hpp"

namespace kvcache::conformance {
namespace {

using ::testing::HasSubstr;

TEST_P(StoreConformance, StoredBytesEqualTheReference) {
  KVCACHE_OPEN_STORE_OR_SKIP(store, GetParam().backend, spec(64));
  std::map<SeqId, Shadow> shadows;
  const SeqId a = store->create_sequence(), b = store->create_sequence();
  shadows[a].group = 0;
  shadows[b].group = 1;
  step(*store, shadows, {a, b}, {9, 3});  // a prefill each, ragged
  step(*store, shadows, {a, b}, {1, 1});  // a decode step
  step(*store, shadows, {b}, {7});
  for (const auto& [id, s] : shadows) check_contents(*store, id, s);
  check_invariants(*store, shadows);
}

TEST_P(StoreConformance, HalfPrecisionInputsMatchTheirFloatValues) {
  KVCACHE_OPEN_STORE_OR_SKIP(store, GetParam().backend, spec(16));
  const SeqId a = store->create_sequence(), b = store->create_sequence();
  store->reserve(std::vector<SeqId>{a, b}, std::vector<std::uint32_t>{3, 3});
  for (const bool bf16 : {false, true}) {
    std::vector<float> f32(3 * kHeads * kDim);
    std::vector<std::uint16_t> half(f32.size());
    std::mt19937 rng(bf16 ? 2 : 1);
    std::normal_distribution<float> normal;
    for (std::size_t i = 0; i < f32.size(); ++i) {
      half[i] = bf16 ? bf16_from_float(normal(rng)) : fp16_from_float(normal(rng));
      f32[i] = bf16 ? float_from_bf16(half[i]) : float_from_fp16(half[i]);
    }
    std::int64_t shape[3] = {3, kHeads, kDim};
    DLTensor h = host_tensor(static_cast<float*>(nullptr), shape);
    h.data = half.data();
    h.dtype = {static_cast<std::uint8_t>(bf16 ? kDLBfloat : kDLFloat), 16, 1};
    const DLTensor f = host_tensor(f32.data(), shape);
    const SeqId id = bf16 ? b : a;
    store->append(0, std::vector<SeqId>{id}, std::vector<std::uint32_t>{3}, h, h);
    store->append(1, std::vector<SeqId>{id}, std::vector<std::uint32_t>{3}, f, f);
    const auto page =
        static_cast<std::uint32_t>(store->page_table(std::vector<SeqId>{id}).indices[0]);
    EXPECT_EQ(store->read_tile(page, 0, 1, false), store->read_tile(page, 1, 1, false));
  }
}

TEST_P(StoreConformance, BadInputsAreRejectedWithoutChange) {
  KVCACHE_OPEN_STORE_OR_SKIP(store, GetParam().backend, spec(8));
  const SeqId a = store->create_sequence();
  store->reserve(std::vector<SeqId>{a}, std::vector<std::uint32_t>{2});
  std::vector<float> data(3 * kHeads * kDim, 1.0f);
  std::int64_t shape[3] = {3, kHeads, kDim};
  const DLTensor t = host_tensor(data.data(), shape);
  try {
    store->append(0, std::vector<SeqId>{a}, std::vector<std::uint32_t>{3}, t, t);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::invalid_argument);
    EXPECT_THAT(e.what(), HasSubstr("exceeds its 2 reserved unwritten slots"));
  }
  std::int64_t wrong[3] = {2, kHeads, kDim + 1};
  const DLTensor w = host_tensor(data.data(), wrong);
  EXPECT_THROW(store->append(0, std::vector<SeqId>{a}, std::vector<std::uint32_t>{2}, w, w), Error);
  EXPECT_EQ(store->written(a, 0), 0u);
  EXPECT_THROW(store->append(5, std::vector<SeqId>{a}, std::vector<std::uint32_t>{0}, t, t), Error);
  EXPECT_THROW(store->reserve(std::vector<SeqId>{999}, std::vector<std::uint32_t>{1}), Error);
  EXPECT_THROW(store->fork(a), Error);  // slots reserved but unwritten
  std::int64_t two[3] = {2, kHeads, kDim};
  const DLTensor t2 = host_tensor(data.data(), two);
  try {  // the same sequence twice in one append would write the same slots twice
    store->append(0, std::vector<SeqId>{a, a}, std::vector<std::uint32_t>{1, 1}, t2, t2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("appears twice in one batch"));
  }
  EXPECT_EQ(store->written(a, 0), 0u);
}

TEST_P(StoreConformance, ReserveIsAllOrNothing) {
  KVCACHE_OPEN_STORE_OR_SKIP(store, GetParam().backend, spec(6));
  const std::uint32_t p = GetParam().page_size;
  std::map<SeqId, Shadow> shadows;
  const SeqId a = store->create_sequence(), b = store->create_sequence();
  step(*store, shadows, {a}, {3 * p});
  const StoreStats before = store->stats();
  ASSERT_EQ(before.free_pages, 3u);
  try {
    store->reserve(std::vector<SeqId>{a, b}, std::vector<std::uint32_t>{p, 3 * p});
    FAIL() << "4 pages cannot come from 3";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::out_of_memory);
    EXPECT_THAT(
        e.what(),
        HasSubstr("reserve needs 4 pages, 3 available (3 free, 0 cached); nothing was reserved"));
  }
  EXPECT_EQ(store->length(a), 3 * p);
  EXPECT_EQ(store->length(b), 0u);
  EXPECT_EQ(store->stats().free_pages, before.free_pages);
  step(*store, shadows, {a, b}, {p, 2 * p});  // exactly what is left
  EXPECT_EQ(store->stats().free_pages, 0u);
  check_invariants(*store, shadows);
}

// A reserve given back (how the Cache undoes a step that did not finish): the newest slots go,
// written or not, pages past the new length return to the pool, the next reserve hands out the
// same positions again, and what came before is untouched. A format that groups tokens refuses,
// changing nothing, to give back slots of a group it has already encoded.
TEST_P(StoreConformance, UnreserveGivesBackTheNewestSlots) {
  KVCACHE_OPEN_STORE_OR_SKIP(store, GetParam().backend, spec(8));
  const std::uint32_t p = GetParam().page_size;
  std::map<SeqId, Shadow> shadows;
  const SeqId a = store->create_sequence();
  step(*store, shadows, {a}, {p + 1});
  const StoreStats before = store->stats();
  const std::vector<SeqId> ids{a};
  const std::vector<std::uint32_t> more{2 * p};
  store->reserve(ids, more);  // nothing written: given back whole
  store->unreserve(a, 2 * p);
  EXPECT_EQ(store->length(a), p + 1);
  EXPECT_EQ(store->stats().free_pages, before.free_pages);
  // Written on the first layer only, as by a step that failed on the second.
  store->reserve(ids, more);
  std::vector<float> rows(std::size_t{2} * p * kHeads * kDim, 0.5f);
  std::int64_t shape[3] = {2 * p, kHeads, kDim};
  const DLTensor t = host_tensor(rows.data(), shape);
  store->append(0, ids, more, t, t);
  if (groups_tokens()) {
    try {
      store->unreserve(a, 2 * p);
      FAIL() << "a group was encoded from slots given back";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::unsupported);
      EXPECT_THAT(e.what(), HasSubstr("has already encoded the group of tokens"));
    }
    EXPECT_EQ(store->length(a), 3 * p + 1) << "nothing changed";
    return;
  }
  store->unreserve(a, 2 * p);
  EXPECT_EQ(store->written(a, 0), p + 1);
  EXPECT_EQ(store->stats().free_pages, before.free_pages);
  check_contents(*store, a, shadows[a]);
  step(*store, shadows, {a}, {2 * p});  // the same positions again
  check_contents(*store, a, shadows[a]);
  check_invariants(*store, shadows);
  EXPECT_THROW(store->unreserve(a, 4 * p), Error) << "more than the sequence holds";
}

TEST_P(StoreConformance, ForkSharesPagesAndCopiesOnWrite) {
  KVCACHE_OPEN_STORE_OR_SKIP(store, GetParam().backend, spec(16));
  const std::uint32_t p = GetParam().page_size;
  std::map<SeqId, Shadow> shadows;
  const SeqId a = store->create_sequence();
  step(*store, shadows, {a}, {p + 1});  // one full page and one partial
  const SeqId b = store->fork(a);
  shadows[b] = shadows[a];
  const StoreStats shared = store->stats();
  EXPECT_EQ(shared.used_pages, 2u);
  EXPECT_EQ(store->page_table(std::vector<SeqId>{b}).indices,
            store->page_table(std::vector<SeqId>{a}).indices);
  shadows[b].group = 1;  // b diverges after the fork point
  step(*store, shadows, {b}, {1});
  const auto ta = store->page_table(std::vector<SeqId>{a}).indices;
  const auto tb = store->page_table(std::vector<SeqId>{b}).indices;
  EXPECT_EQ(ta[0], tb[0]);  // the full page stays shared
  EXPECT_NE(ta[1], tb[1]);  // the partial one was copied before b wrote
  step(*store, shadows, {a}, {2});
  for (const auto& [id, s] : shadows) check_contents(*store, id, s);
  check_invariants(*store, shadows);
}

TEST_P(StoreConformance, DropCompactsAndKeepsPositions) {
  KVCACHE_OPEN_STORE_OR_SKIP(store, GetParam().backend, spec(16));
  const std::uint32_t p = GetParam().page_size;
  std::map<SeqId, Shadow> shadows;
  const SeqId a = store->create_sequence();
  step(*store, shadows, {a}, {3 * p + 1});
  const SeqId b = store->fork(a);  // dropping from a must not disturb b
  shadows[b] = shadows[a];
  const std::vector<PositionRange> ranges{
      {1, 3}, {static_cast<Position>(p) + 1, static_cast<Position>(2 * p)}};
  if (groups_tokens()) {  // scales span groups of tokens: no token can leave alone
    try {
      store->drop(a, ranges);
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::unsupported);
    }
    EXPECT_EQ(store->length(a), 3 * p + 1);
    return;
  }
  const std::uint64_t dropped = store->drop(a, ranges);
  auto& tokens = shadows[a].tokens;
  std::erase_if(tokens, [&](const Token& t) {
    return std::any_of(ranges.begin(), ranges.end(),
                       [&](const PositionRange& r) { return t.pos >= r.begin && t.pos < r.end; });
  });
  EXPECT_EQ(dropped, 2u + (p - 1));
  EXPECT_EQ(store->drop(a, std::vector<PositionRange>{{1, 3}}), 0u);  // already gone
  step(*store, shadows, {a, b}, {2, 1});  // new positions continue after compaction
  for (const auto& [id, s] : shadows) check_contents(*store, id, s);
  check_invariants(*store, shadows);
}

// A drop of whole pages (a sliding layer group's pages behind its window, a sink's page kept):
// the pages go back to the pool, the kept slots keep their contents and positions, and new
// tokens follow; a fork that shares the dropped pages keeps them.
TEST_P(StoreConformance, DropOfWholePagesGivesThemBack) {
  KVCACHE_OPEN_STORE_OR_SKIP(store, GetParam().backend, spec(16));
  if (groups_tokens())
    GTEST_SKIP() << "scales span groups of tokens: DropCompactsAndKeepsPositions";
  const std::uint32_t p = GetParam().page_size;
  std::map<SeqId, Shadow> shadows;
  const SeqId a = store->create_sequence();
  step(*store, shadows, {a}, {4 * p + 3});
  const SeqId b = store->fork(a);
  shadows[b] = shadows[a];
  const StoreStats before = store->stats();
  const std::vector<PositionRange> ranges{
      {static_cast<Position>(p), static_cast<Position>(3 * p)}};  // pages 1 and 2; 0 stays
  EXPECT_EQ(store->drop(a, ranges), 2u * p);
  std::erase_if(shadows[a].tokens,
                [&](const Token& t) { return t.pos >= ranges[0].begin && t.pos < ranges[0].end; });
  EXPECT_EQ(store->stats().used_pages, before.used_pages) << "the fork still holds them";
  for (const auto& [id, s] : shadows) check_contents(*store, id, s);
  store->release(b);
  shadows.erase(b);
  EXPECT_EQ(store->stats().used_pages, before.used_pages - 2);
  step(*store, shadows, {a}, {p + 1});
  check_contents(*store, a, shadows[a]);
  check_invariants(*store, shadows);
}

TEST_P(StoreConformance, ConcurrentAppendsToDifferentSequences) {
  KVCACHE_OPEN_STORE_OR_SKIP(store, GetParam().backend, spec(32));
  std::map<SeqId, Shadow> shadows;
  const SeqId a = store->create_sequence(), b = store->create_sequence();
  shadows[a];
  shadows[b].group = 1;
  store->reserve(std::vector<SeqId>{a, b}, std::vector<std::uint32_t>{40, 40});
  const auto writer = [&](SeqId id, int group) {
    for (Position pos = 0; pos < 40; ++pos) {
      for (std::uint32_t layer = 0; layer < kLayers; ++layer) {
        std::vector<float> k(kHeads * kDim), v(k.size());
        for (std::uint32_t h = 0; h < kHeads; ++h) {
          const auto kr = row_for(token_id(group, pos), pos, layer, h, false, kDim);
          const auto vr = row_for(token_id(group, pos), pos, layer, h, true, kDim);
          std::copy(kr.begin(), kr.end(), k.begin() + h * kDim);
          std::copy(vr.begin(), vr.end(), v.begin() + h * kDim);
        }
        std::int64_t shape[3] = {1, kHeads, kDim};
        store->append(layer, std::vector<SeqId>{id}, std::vector<std::uint32_t>{1},
                      host_tensor(k.data(), shape), host_tensor(v.data(), shape));
      }
    }
  };
  std::thread ta(writer, a, 0), tb(writer, b, 1);
  ta.join();
  tb.join();
  for (auto& [id, s] : shadows)
    for (Position pos = 0; pos < 40; ++pos) s.tokens.push_back({token_id(s.group, pos), pos});
  for (const auto& [id, s] : shadows) check_contents(*store, id, s);
}

TEST_P(StoreConformance, RandomizedWorkloadKeepsInvariantsAndLeaksNothing) {
  KVCACHE_OPEN_STORE_OR_SKIP(store, GetParam().backend, spec(24));
  const std::uint32_t p = GetParam().page_size;
  std::map<SeqId, Shadow> shadows;
  std::mt19937 rng(1234);
  const auto pick = [&]() {
    auto it = shadows.begin();
    std::advance(it, std::uniform_int_distribution<std::size_t>(0, shadows.size() - 1)(rng));
    return it->first;
  };
  int failures = 0;
  for (int op = 0; op < 250; ++op) {
    const int choice = std::uniform_int_distribution<int>(0, 9)(rng);
    if (shadows.empty() || choice == 0) {
      const SeqId id = store->create_sequence();
      shadows[id].group = static_cast<int>(rng() % 2);
    } else if (choice <= 4) {
      std::vector<SeqId> ids;
      std::vector<std::uint32_t> counts;
      for (int i = 0; i < 2; ++i) {
        const SeqId id = pick();
        if (std::find(ids.begin(), ids.end(), id) != ids.end()) continue;
        ids.push_back(id);
        counts.push_back(std::uniform_int_distribution<std::uint32_t>(1, 2 * p)(rng));
      }
      const StoreStats before = store->stats();
      try {
        step(*store, shadows, ids, counts);
      } catch (const Error& e) {
        ASSERT_EQ(e.code(), Code::out_of_memory) << e.what();
        ASSERT_EQ(store->stats().free_pages, before.free_pages);  // nothing changed
        ++failures;
      }
    } else if (choice == 5) {
      const SeqId parent = pick();
      const SeqId child = store->fork(parent);
      shadows[child] = shadows[parent];
    } else if (choice == 6) {
      const SeqId id = pick();
      Shadow& s = shadows[id];
      const Position begin = std::uniform_int_distribution<Position>(0, s.next_position + 1)(rng);
      const PositionRange r{begin, begin + std::uniform_int_distribution<Position>(1, p + 2)(rng)};
      try {
        const std::uint64_t removed = store->drop(id, std::vector<PositionRange>{r});
        const std::size_t before = s.tokens.size();
        std::erase_if(s.tokens, [&](const Token& t) { return t.pos >= r.begin && t.pos < r.end; });
        ASSERT_EQ(removed, before - s.tokens.size());
        if (removed > 0) s.compacted = true;
      } catch (const Error& e) {
        ASSERT_EQ(e.code(), groups_tokens() ? Code::unsupported : Code::out_of_memory) << e.what();
      }
    } else if (choice == 7) {
      const SeqId id = pick();
      store->release(id);
      shadows.erase(id);
    } else if (choice == 8) {
      const SeqId id = pick();
      const Shadow& s = shadows[id];
      std::vector<std::int32_t> ids;
      for (const Token& t : s.tokens) ids.push_back(t.id);
      if (s.compacted) {
        EXPECT_THROW(store->publish_prefix(id, ids), Error);
      } else {
        store->publish_prefix(id, ids);
      }
    } else {
      const int group = static_cast<int>(rng() % 2);
      std::vector<std::int32_t> ids;
      for (Position pos = 0; pos < 3 * p; ++pos) ids.push_back(token_id(group, pos));
      const SeqId id = store->create_sequence();
      Shadow& s = shadows[id];
      s.group = group;
      const std::uint64_t matched = store->match_prefix(id, ids);
      ASSERT_EQ(matched % p, 0u);
      for (Position pos = 0; pos < static_cast<Position>(matched); ++pos)
        s.tokens.push_back({ids[pos], pos});
      s.next_position = static_cast<Position>(matched);
    }
    check_invariants(*store, shadows);
  }
  for (const auto& [id, s] : shadows) check_contents(*store, id, s);
  EXPECT_GT(failures, 0) << "the workload should reach memory pressure";
  for (const auto& [id, s] : shadows) store->release(id);
  store->evict_cached(store->stats().total_pages);
  const StoreStats st = store->stats();
  EXPECT_EQ(st.free_pages, st.total_pages) << "pages leaked";
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreConformance, ::testing::ValuesIn(store_cases()), case_name);

// Every backend found runs here or says why not (once, instead of skipping each case above): an
// available one lists a device and makes a store.
class BackendAvailability : public ::testing::TestWithParam<std::string> {};

TEST_P(BackendAvailability, RunsHereOrSaysWhyNot) {
  const ComponentInfo* info = registry().find(ComponentKind::backend, GetParam());
  if (info == nullptr) GTEST_SKIP() << "backend " << GetParam() << " is not installed";
  if (!info->available)
    GTEST_SKIP() << GetParam() << " cannot run here: " << info->unavailable_reason;
  const auto backend = registry().create_backend(GetParam());
  EXPECT_FALSE(backend->devices().empty());
  StoreSpec spec;
  spec.model = {1, 2, 1, 64};
  spec.capacity_bytes = 1 << 20;
  EXPECT_GT(backend->create_store(with_codecs(spec))->info().total_pages, 0u);
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendAvailability, ::testing::ValuesIn(found_backends()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return test_name(info.param);
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(BackendAvailability);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(StoreConformance);

}  // namespace
}  // namespace kvcache::conformance
