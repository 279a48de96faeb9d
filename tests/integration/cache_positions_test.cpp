// RoPE positions within the cache through the Cache (docs/streaming.md): sinks + window with
// `positions: cache` needs the model's RoPE and a backend that turns queries, and says which is
// missing; `positions: original` is today's attention bit for bit; streaming eviction under cache
// positions gives what the same mask gives without eviction, at constant memory.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvcache/cache.hpp"
#include "kvcache/registry.hpp"
#include "kvcache/tensor.hpp"
#include "test_registry.hpp"

namespace kvcache {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<const Registry> registry() {
  return testing::test_registry();
}

const std::string kModel =
    "model: {layers: 2, q_heads: 4, kv_heads: 2, head_dim: 32, rope: {theta: 10000}}\n";

Config config_of(const std::string& yaml) {
  return parse_config(kModel + yaml, "<test>", {});
}

// Decodes `steps` tokens of two sequences through the step API with K, V and q drawn from one
// seed; returns every output, and the most pages the store held.
struct Outputs {
  std::vector<float> outputs;
  std::uint64_t peak_pages = 0;
};
Outputs decode(Cache& cache, int steps) {
  const std::vector<SeqId> ids{cache.add_sequence(), cache.add_sequence()};
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> k(2 * 2 * 32), v(k.size()), q(2 * 4 * 32), out(q.size());
  Outputs run;
  for (int t = 0; t < steps; ++t) {
    auto step = cache.begin_step(ids, std::vector<std::uint32_t>{1, 1});
    for (std::uint32_t layer = 0; layer < 2; ++layer) {
      for (float& x : k) x = normal(rng);
      for (float& x : v) x = normal(rng);
      for (float& x : q) x = normal(rng);
      step.append(layer, Tensor::host(k.data(), {2, 2, 32}), Tensor::host(v.data(), {2, 2, 32}));
      Tensor o = Tensor::host(out.data(), {2, 4, 32});
      step.decode(layer, Tensor::host(q.data(), {2, 4, 32}), o);
      run.outputs.insert(run.outputs.end(), out.begin(), out.end());
    }
    (void)step.finish();
    run.peak_pages = std::max(run.peak_pages, cache.stats().used_pages);
  }
  return run;
}

TEST(CachePositions, OriginalPositionsAreTodaysAttentionBitForBit) {
  const std::string mask =
      "backend: [cpu-tbb]\ncache: {capacity: 16MiB}\nmask: {name: sink-window, sinks: 4, "
      "window: 24";
  const Outputs today = decode(*Cache::open(config_of(mask + "}\n"), registry()), 100);
  const Outputs original =
      decode(*Cache::open(config_of(mask + ", positions: original}\n"), registry()), 100);
  ASSERT_EQ(today.outputs.size(), original.outputs.size());
  EXPECT_EQ(std::memcmp(today.outputs.data(), original.outputs.data(),
                        today.outputs.size() * sizeof(float)),
            0);
  // Before the window leaves the sinks (28 tokens) cache positions are the original ones too.
  const Outputs early =
      decode(*Cache::open(config_of(mask + ", positions: cache}\n"), registry()), 100);
  const std::size_t per_step = 2 * 2 * 4 * 32;
  EXPECT_EQ(std::memcmp(today.outputs.data(), early.outputs.data(), 28 * per_step * sizeof(float)),
            0);
  // After it they differ: the sinks see the query nearer.
  EXPECT_NE(std::memcmp(today.outputs.data() + 40 * per_step, early.outputs.data() + 40 * per_step,
                        per_step * sizeof(float)),
            0);
}

TEST(CachePositions, StreamingEvictionEqualsTheMaskWithoutEviction) {
  for (const std::string format : {"fp32", "int8-per-token", "int4-group"}) {
    const std::string common =
        "backend: [cpu-tbb]\nformat: " + format +
        "\ncache: {page_size: 16, capacity: 64MiB, prefix_caching: false}\n"
        "mask: {name: sink-window, sinks: 4, window: 60, positions: cache}\n";
    const Outputs kept = decode(*Cache::open(config_of(common), registry()), 400);
    const Outputs evicted = decode(
        *Cache::open(config_of(common + "eviction: {name: streaming, sinks: 4, window: 60}\n"),
                     registry()),
        400);
    ASSERT_EQ(kept.outputs.size(), evicted.outputs.size());
    for (std::size_t e = 0; e < kept.outputs.size(); ++e)
      ASSERT_NEAR(evicted.outputs[e], kept.outputs[e], 1e-5 + 1e-5 * std::fabs(kept.outputs[e]))
          << format << " element " << e;
    // Two sequences of 4 sinks + 60 window tokens: at most 5 pages each, whatever the length.
    EXPECT_LE(evicted.peak_pages, 10u) << format;
    EXPECT_GT(kept.peak_pages, 40u) << format;
  }
}

TEST(CachePositions, NeedTheModelsRopeAndABackendThatTurnsQueries) {
  const std::string mask = "mask: {name: sink-window, sinks: 4, window: 24, positions: cache}\n";
  // No rope: the error is at the mask's place in the config, and says what to set.
  const Config no_rope = parse_config(
      "model: {layers: 2, q_heads: 4, kv_heads: 2, head_dim: 32}\n"
      "backend: [cpu-tbb]\n" +
          mask,
      "<test>", {});
  const std::vector<Diagnostic> found = check_components(no_rope, *registry());
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].where.line, 3u);
  EXPECT_THAT(found[0].message, HasSubstr("set model.rope"));
  EXPECT_THROW(Cache::open(no_rope, registry()), Error);
  // A backend that does not declare query_rotation (the scalar example's, as test-faulty).
  const Config scalar = config_of("backend: [test-faulty]\n" + mask);
  try {
    (void)Cache::open(scalar, registry());
    FAIL() << "opened a cache whose backend cannot turn queries";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::unsupported);
    EXPECT_THAT(e.what(), HasSubstr("query_rotation"));
  }
  // A misspelt value is refused with the nearest.
  try {
    (void)Cache::open(
        config_of("backend: [cpu-tbb]\nmask: {name: sink-window, sinks: 4, window: 24, "
                  "positions: cashe}\n"),
        registry());
    FAIL() << "accepted positions: cashe";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'cache'"));
  }
}

}  // namespace
}  // namespace kvcache
