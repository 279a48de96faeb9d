// The Cache facade driving the eviction policies: one test binary, three configs, the same
// workload, the expected different reports (policies swap by config, never by recompiling);
// StreamingLLM keeps memory constant over 50k tokens with exact attention on what it kept;
// and under random pressure nothing leaves the cache without being reported.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cache_workload.hpp"
#include "kvcache/host_tensor.hpp"
#include "kvcache/reference_attention.hpp"

namespace kvcache {
namespace {

using testing::Workload;

std::shared_ptr<const Registry> registry() {
  static const auto r = Registry::load(PluginSettings{});
  return r;
}

std::unique_ptr<Cache> open(const std::string& file, const Environment& env = {}) {
  return Cache::open(
      load_config(std::string(KVCACHE_TEST_SOURCE_DIR) + "/integration/configs/" + file, env),
      registry());
}

// Four sequences: a 32-token prompt each, then 568 decode steps; 1 MiB holds about 2000 tokens.
EvictionReport run_workload(Cache& cache) {
  Workload w(cache);
  std::vector<SeqId> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(w.add());
  w.step(ids, 32);
  for (int t = 0; t < 568; ++t) w.step(w.live(), 1);
  w.check_nothing_lost();
  return w.total();
}

// Under pressure a policy is asked for the pages the new tokens need, not one more per sequence:
// three sequences of one page each fill a pool of three, and a fourth's page costs exactly one
// of them (the least recently used).
TEST(CachePolicies, PressurePreemptsOnlyWhatTheReserveNeeds) {
  const auto cache =
      Cache::open(parse_config("model: {layers: 1, q_heads: 2, kv_heads: 1, head_dim: 16}\n"
                               "backend: [cpu-tbb]\n"
                               "cache: {page_size: 16, capacity: 4KiB, prefix_caching: false}\n"
                               "eviction: {name: lru}\n",
                               "<test>", {}),
                  registry());
  ASSERT_EQ(cache->store().stats().total_pages, 3u);
  Workload w(*cache);
  std::vector<SeqId> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(w.add());
  for (const SeqId id : ids) w.step({id}, 8);
  w.step({w.add()}, 8);
  w.check_nothing_lost();
  EXPECT_EQ(w.total().preempted, std::vector<SeqId>{ids[0]});
}

TEST(CachePolicies, SameWorkloadThreeConfigsThreeReports) {
  const auto oldest = open("oldest_first.yaml");
  EXPECT_EQ(oldest->backend(), "cpu-tbb");
  const EvictionReport a = run_workload(*oldest);
  ASSERT_FALSE(a.preempted.empty()) << "the workload needs more memory than 1 MiB";
  EXPECT_EQ(a.preempted.front(), 1u) << "the seed's policy preempts the oldest first";
  EXPECT_TRUE(a.dropped.empty());

  const auto streaming = open("streaming.yaml");
  const EvictionReport b = run_workload(*streaming);
  EXPECT_TRUE(b.preempted.empty()) << "a bounded window fits";
  ASSERT_FALSE(b.dropped.empty());
  for (const DroppedRange& d : b.dropped) EXPECT_GE(d.range.begin, 4) << "sinks stay";
  for (SeqId id : streaming->sequences()) EXPECT_LE(streaming->store().length(id), 4u + 64u + 16u);

  const auto heavy = open("heavy_hitter.yaml");
  const EvictionReport c = run_workload(*heavy);
  EXPECT_TRUE(c.preempted.empty());
  ASSERT_FALSE(c.dropped.empty());
  // Unlike a window, H2O keeps heavy tokens in the middle: its drops are scattered.
  EXPECT_TRUE(std::any_of(c.dropped.begin(), c.dropped.end(),
                          [](const DroppedRange& d) { return d.range.begin > 4; }));
  for (SeqId id : heavy->sequences()) EXPECT_LE(heavy->store().length(id), 96u + 16u);
}

TEST(CachePolicies, WithoutEvictionAReserveThatCannotFitFailsAndChangesNothing) {
  const auto cache = open("oldest_first.yaml", {{"KVCACHE_EVICTION", "none"}});
  const SeqId a = cache->add_sequence();
  const std::vector<SeqId> ids{a};
  try {
    cache->reserve(ids, std::vector<std::uint32_t>{100000});
    FAIL();
  } catch (const CacheFull& e) {
    EXPECT_TRUE(e.report().empty());
    EXPECT_THAT(e.what(), ::testing::HasSubstr("reserve needs 6250 pages"));
  }
  EXPECT_EQ(cache->store().length(a), 0u);
}

TEST(CachePolicies, PriorityPreemptsTheLowestFirst) {
  const auto cache = open("oldest_first.yaml", {{"KVCACHE_EVICTION", "priority"}});
  Workload w(*cache);
  const SeqId high = w.add(90), low = w.add(5), mid = w.add(50);
  w.step({high, low, mid}, 32);
  while (w.total().preempted.empty()) w.step(w.live(), 1);
  EXPECT_EQ(w.total().preempted.front(), low);
  w.check_nothing_lost();
}

// StreamingLLM over 50k generated tokens (48 windows) with 4 sinks and a window of 1024: memory
// stays constant, and attention equals the reference computed on the tokens it kept (twice).
TEST(CachePolicies, StreamingKeepsMemoryConstantAndAttentionExact) {
  Config config = default_config({});
  config.model = {1, 2, 1, 16};
  config.backends = {{.name = "cpu-tbb"}};
  config.cache = {16, 4ull << 20, false};
  config.k_format = config.v_format = {.name = "fp32"};
  config.mask = {.name = "sink-window", .options = {{"sinks", 4}, {"window", 1024}}};
  config.eviction = {.name = "streaming", .options = {{"sinks", 4}, {"window", 1024}}};
  const auto cache = Cache::open(config, registry());
  const SeqId id = cache->add_sequence();
  const std::vector<SeqId> ids{id};
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> k(16), v(16), q(32), out(32);
  std::int64_t kv_shape[3] = {1, 1, 16}, q_shape[3] = {1, 2, 16};
  const DLTensor kt = host_tensor(k.data(), kv_shape);
  const DLTensor vt = host_tensor(v.data(), kv_shape);
  const DLTensor qt = host_tensor(q.data(), q_shape);
  DLTensor ot = host_tensor(out.data(), q_shape);
  std::uint64_t peak_pages = 0, pages_at_10k = 0;
  for (Position t = 0; t < 50000; ++t) {
    for (float& x : k) x = normal(rng);
    for (float& x : v) x = normal(rng);
    for (float& x : q) x = normal(rng);
    ASSERT_TRUE(cache->reserve(ids, std::vector<std::uint32_t>{1}).empty());
    cache->append(0, ids, std::vector<std::uint32_t>{1}, kt, vt);
    cache->decode(0, ids, qt, ot);
    if (t % 20011 == 20010) {  // attention against the reference on the kept tokens
      const std::vector<Position> kept = cache->store().positions(id);
      std::vector<float> keys(kept.size() * 16), values(keys.size());
      std::int64_t shape[3] = {static_cast<std::int64_t>(kept.size()), 1, 16};
      DLTensor kk = host_tensor(keys.data(), shape);
      DLTensor vv = host_tensor(values.data(), shape);
      cache->store().gather(0, id, kk, vv);
      std::vector<float> want(32);
      const std::vector<PositionRange> visible{{0, 4}, {t - 1023, t + 1}};
      reference::attention({2, 1, 16}, q, keys, values, kept, visible, 0.25f, want);
      for (int e = 0; e < 32; ++e) ASSERT_NEAR(out[e], want[e], 1e-4) << "step " << t;
      EXPECT_EQ(kept.front(), 0);
      EXPECT_EQ(kept.back(), t);
    }
    const EvictionReport r = cache->end_step();
    for (const DroppedRange& d : r.dropped) ASSERT_GE(d.range.begin, 4);
    peak_pages = std::max(peak_pages, cache->stats().used_pages);
    if (t == 10000) pages_at_10k = cache->stats().used_pages;
  }
  EXPECT_LE(peak_pages, (4u + 1024u + 16u) / 16u + 2u);
  EXPECT_LE(cache->stats().used_pages, pages_at_10k + 1);
}

TEST(CachePolicies, RandomPressureLosesNothingUnreported) {
  for (const std::string policy :
       {"oldest-first", "lru", "priority", "streaming", "heavy-hitter"}) {
    Environment env{{"KVCACHE_EVICTION", policy}};
    const auto cache =
        open(policy == "streaming"      ? "streaming.yaml"
             : policy == "heavy-hitter" ? "heavy_hitter.yaml"
                                        : "oldest_first.yaml",
             policy == "streaming" || policy == "heavy-hitter" ? Environment{} : env);
    Workload w(*cache, 99);
    std::mt19937 rng(7);
    for (int op = 0; op < 300; ++op) {
      const int choice = static_cast<int>(rng() % 10);
      if (w.live().size() < 2 || choice == 0) {
        w.step({w.add(static_cast<std::int32_t>(rng() % 101))}, 1 + rng() % 40);
      } else {
        try {
          w.step(w.live(), choice < 8 ? 1 : 1 + rng() % 20);
        } catch (const CacheFull& e) {
          ADD_FAILURE() << policy << ": " << e.what();  // a policy always finds room here
        }
      }
      w.check_nothing_lost();
      if (::testing::Test::HasFatalFailure()) return;
    }
    EXPECT_FALSE(w.total().empty()) << policy << ": the workload should make the policy act";
    std::printf("%-13s preempted %zu sequences, dropped %zu ranges\n", policy.c_str(),
                w.total().preempted.size(), w.total().dropped.size());
  }
}

}  // namespace
}  // namespace kvcache
