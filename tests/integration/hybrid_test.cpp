// A cache of several layer groups through the facade, on cpu-tbb and the GPU emulator: a
// rollback within a sliding group's page slack gives what never having the tokens gives, one
// past its freed pages is refused and changes nothing; stats sum the groups, each group's share
// of the capacity follows layers.context, the per-layer calls agree with the step, preemption
// leaves every group, a token-dropping policy drops from every group as from one; and what a
// group cannot run is refused by name.
#include <string>
#include <vector>

#include "hybrid_fixture.hpp"

namespace kvcache {
namespace {

using ::testing::HasSubstr;
using namespace hybrid;

TEST_P(HybridOn, ARollbackWithinThePageSlackGivesWhatNeverHavingTheTokensGives) {
  const auto rolled = open(), straight = open();
  const SeqId a = rolled->add_sequence(), b = straight->add_sequence();
  run_step(*rolled, a, 30, 1);
  run_step(*straight, b, 30, 1);
  for (unsigned i = 0; i < 8; ++i) {
    run_step(*rolled, a, 1, 10 + i);
    run_step(*straight, b, 1, 10 + i);
  }
  run_step(*rolled, a, 2, 2);  // draft tokens 38 and 39, rejected
  // Positions 16.. are held in the sliding group (its page 16..23 holds the window's start).
  rolled->truncate(a, 38);
  for (std::size_t g = 0; g < 2; ++g)
    EXPECT_EQ(rolled->group_store(g).positions(a), straight->group_store(g).positions(b)) << g;
  for (const unsigned seed : {3u, 4u, 5u})
    EXPECT_EQ(run_step(*rolled, a, seed == 3 ? 3 : 1, seed),
              run_step(*straight, b, seed == 3 ? 3 : 1, seed))
        << "step " << seed;
}

TEST_P(HybridOn, ARollbackPastTheFreedPagesIsRefusedAndChangesNothing) {
  const auto cache = open();
  const SeqId a = cache->add_sequence();
  run_step(*cache, a, 30, 1);
  for (unsigned i = 0; i < 10; ++i) run_step(*cache, a, 1, 10 + i);
  const std::vector<Position> local = cache->group_store(0).positions(a);
  ASSERT_GT(local.front(), 0) << "the sliding group freed nothing";
  try {
    cache->truncate(a, 10);
    FAIL() << "rolled back to 10 without the window before it";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::unsupported);
    EXPECT_THAT(e.what(), HasSubstr("layer group 'local' has freed positions"));
  }
  EXPECT_EQ(cache->group_store(0).positions(a), local);
  EXPECT_EQ(cache->group_store(1).length(a), 40u);
  run_step(*cache, a, 1, 99);  // and it goes on
  EXPECT_EQ(cache->group_store(1).length(a), 41u);
}

// layers.rollback keeps that many tokens behind the window: a truncate of as many (a speculative
// decoder's rejected drafts) then gives what never having the tokens gives.
TEST_P(HybridOn, LayersRollbackKeepsThatManyTokensBehindTheWindowForATruncate) {
  const auto rolled = open_yaml(hybrid_yaml(GetParam()) + "  rollback: 16\n"), straight = open();
  const SeqId a = rolled->add_sequence(), b = straight->add_sequence();
  run_step(*rolled, a, 20, 1);
  run_step(*straight, b, 20, 1);
  for (unsigned i = 0; i < 30; ++i) run_step(*rolled, a, 1, 10 + i);
  for (unsigned i = 0; i < 14; ++i) run_step(*straight, b, 1, 10 + i);
  ASSERT_GT(rolled->group_store(0).positions(a).front(), 0) << "the sliding group freed nothing";
  rolled->truncate(a, 34);  // 16 back: a query at 34 sees 15..34, which the margin kept
  for (unsigned seed = 50; seed < 53; ++seed)
    EXPECT_EQ(run_step(*rolled, a, 1, seed), run_step(*straight, b, 1, seed)) << seed;
  EXPECT_THROW(straight->truncate(b, 10), Error);  // without the margin: refused
}

TEST_P(HybridOn, StatsSumTheGroupsAndStoreNamesTheWayToEach) {
  const auto cache = open();
  const SeqId a = cache->add_sequence();
  run_step(*cache, a, 40, 1);
  const StoreStats local = cache->group_store(0).stats(), global = cache->group_store(1).stats();
  const StoreStats sum = cache->stats();
  EXPECT_EQ(sum.used_pages, local.used_pages + global.used_pages);
  EXPECT_EQ(sum.total_pages, local.total_pages + global.total_pages);
  EXPECT_EQ(sum.used_bytes(), local.used_bytes() + global.used_bytes());
  EXPECT_EQ(sum.total_bytes(), local.total_bytes() + global.total_bytes());
  EXPECT_EQ(global.used_pages, 5u);
  EXPECT_EQ(local.used_pages, 3u) << "positions 16..39: the window of a query at 40 and its page";
  try {
    (void)cache->store();
    FAIL() << "store() chose a group";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("group_store(place(layer).group)"));
  }
  EXPECT_EQ(cache->place(2).group, 1u);
  EXPECT_EQ(cache->place(1).layer, 1u);
}

TEST_P(HybridOn, EachGroupsShareOfTheCapacityFollowsTheContext) {
  const auto cache = open();
  // At 64 tokens in pages of 8, and a page for the step in flight: the sliding group (2 layers)
  // keeps 20/8 + 1 + 1 = 5 pages, the global one (1 layer) 8 + 1: shares of 10 to 9.
  const StoreStats local = cache->group_store(0).stats(), global = cache->group_store(1).stats();
  EXPECT_EQ(local.page_bytes, 2 * global.page_bytes);
  // Bytes in the ratio 10 : 9, so pages (twice the bytes each in the sliding group) 5 : 9.
  EXPECT_NEAR(double(local.total_pages) / double(global.total_pages), 5.0 / 9, 0.01);
  EXPECT_LE(local.total_bytes() + global.total_bytes(), 1u << 20);
}

TEST_P(HybridOn, ThePerLayerCallsAgreeWithTheStep) {
  const auto stepped = open(), layered = open();
  const SeqId a = stepped->add_sequence(), b = layered->add_sequence();
  for (unsigned i = 0; i < 30; ++i) {
    const std::uint32_t tokens = i == 0 ? 12 : 1;
    const std::vector<float> want = run_step(*stepped, a, tokens, i);
    Rows rows(tokens, i);
    const std::vector<SeqId> ids{b};
    const std::vector<std::uint32_t> counts{tokens};
    layered->reserve(ids, counts);
    for (std::uint32_t layer = 0; layer < kLayers; ++layer) {
      layered->append(layer, ids, counts, rows.k_of(), rows.v_of());
      DLTensor o = rows.out_of(layer);
      layered->prefill(layer, ids, counts, rows.q_of(), o);
    }
    layered->end_step();
    ASSERT_EQ(rows.out, want) << "step " << i;
  }
  EXPECT_EQ(layered->group_store(0).positions(b), stepped->group_store(0).positions(a));
}

TEST_P(HybridOn, APreemptedSequenceLeavesEveryGroup) {
  const auto cache = open_yaml(
      "model: {layers: 3, q_heads: 4, kv_heads: 2, head_dim: 32}\nbackend: [" + GetParam() +
      "]\ncache: {page_size: 8, capacity: 64KiB, prefix_caching: false}\n"
      "eviction: {name: oldest-first}\nlayers:\n  groups:\n"
      "    local: {mask: {name: sliding-window, window: 20}}\n    global: {}\n"
      "  pattern: [local x2, global]\n  context: 64\n");
  std::vector<SeqId> ids;
  EvictionReport report;
  for (int i = 0; i < 6; ++i) {
    ids.push_back(cache->add_sequence());
    run_step(*cache, ids.back(), 40, i, &report);
  }
  const std::vector<SeqId> left = cache->sequences();
  EXPECT_FALSE(report.preempted.empty()) << "nothing was preempted";
  EXPECT_EQ(left.size() + report.preempted.size(), ids.size());
  for (std::size_t g = 0; g < 2; ++g)
    EXPECT_EQ(cache->group_store(g).stats().sequences, left.size()) << g;
}

// Dropped tokens leave every layer: the global layer of a hybrid cache under streaming eviction
// sees what the same layer of a cache of one group sees, step after step.
TEST_P(HybridOn, ATokenDroppingPolicyDropsFromEveryGroupAsFromOne) {
  const std::string eviction = "eviction: {name: streaming, sinks: 4, window: 24}\n";
  const auto hybrid = open(eviction);
  const auto uniform = open_yaml(
      "model: {layers: 3, q_heads: 4, kv_heads: 2, head_dim: 32}\n"
      "backend: [" +
      GetParam() +
      "]\n"
      "cache: {page_size: 8, capacity: 1MiB, prefix_caching: false}\n" +
      eviction);
  const SeqId a = hybrid->add_sequence(), b = uniform->add_sequence();
  EvictionReport dropped_hybrid, dropped_uniform;
  const std::size_t global = 2 * kQHeads * kDim;  // layer 2's output of a one-token step
  for (unsigned i = 0; i < 48; ++i) {
    const std::uint32_t tokens = i == 0 ? 20 : 1;
    const std::vector<float> h = run_step(*hybrid, a, tokens, 30 + i, &dropped_hybrid);
    const std::vector<float> u = run_step(*uniform, b, tokens, 30 + i, &dropped_uniform);
    for (std::size_t j = global * tokens; j < h.size(); ++j)
      ASSERT_NEAR(h[j], u[j], 1e-5) << "step " << i;
  }
  ASSERT_FALSE(dropped_uniform.dropped.empty());
  EXPECT_EQ(dropped_hybrid.dropped.size(), dropped_uniform.dropped.size());
  EXPECT_EQ(hybrid->group_store(1).positions(a), uniform->store().positions(b));
  // The sliding group holds only what its window needs and streaming keeps: sinks it never saw
  // again are gone from it, and its window is whole.
  const std::vector<Position> local = hybrid->group_store(0).positions(a);
  EXPECT_EQ(local.back(), 66);   // 20 tokens, then 47 one by one
  EXPECT_LE(local.front(), 48);  // the next query, at 67, sees 48..67
}

TEST(Hybrid, RefusesWhatItDoesNotRunYetByName) {
  const auto refused = [](const std::string& yaml, const std::string& words) {
    try {
      open_yaml(yaml);
      ADD_FAILURE() << "opened: " << words;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::unsupported) << e.what();
      EXPECT_THAT(e.what(), HasSubstr(words));
    }
  };
  refused(hybrid_yaml("cpu-tbb", "", ", format: {k: {name: kivi-k, group: 8}, v: fp16}"),
          "layers.groups.local.format.k: kivi-k scales over groups of tokens");
  // A policy that drops tokens, against a group whose format cannot lose one.
  std::string yaml = hybrid_yaml("cpu-tbb", "eviction: {name: streaming, sinks: 4, window: 24}\n");
  yaml.replace(yaml.find("global: {}"), 10,
               "global: {format: {k: {name: kivi-k, group: 8}, v: fp16}}");
  try {
    open_yaml(yaml);
    ADD_FAILURE() << "opened streaming eviction over kivi-k";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::invalid_argument) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("layers.groups.global."));
  }
}

TEST(Hybrid, GroupsThatDoNotCoverTheModelOnceAreRefused) {
  Config config = parse_config(hybrid_yaml("cpu-tbb"), "hybrid_test.yaml", {});
  config.model.layers = 2;  // made in code after reading: layer 2 is past the model
  try {
    Cache::open(config, testing::test_registry());
    FAIL() << "opened groups past the model";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::invalid_argument);
    EXPECT_THAT(e.what(), HasSubstr("layer 2 is past the model's 2"));
  }
  config.model.layers = 3;
  config.layer_groups[1].layers.push_back(0);
  EXPECT_THROW(Cache::open(config, testing::test_registry()), Error);
}

INSTANTIATE_TEST_SUITE_P(Backends, HybridOn, ::testing::Values("cpu-tbb", "gpu-emulated"));

}  // namespace
}  // namespace kvcache
