// Cache::truncate through the facade, on cpu-tbb and the GPU emulator: a sequence rolled back and
// stepped again gives, bit for bit, the attention of one that never had the rolled-back tokens
// (plain, quantized and token-grouping formats); heavy-hitter scores come back to the truncated
// state at a step's boundary and refuse a cut inside a step, changing nothing; a truncate of an
// open step's member or past the length is refused.
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvcache/cache.hpp"
#include "kvcache/config.hpp"
#include "kvcache/host_tensor.hpp"
#include "test_registry.hpp"

namespace kvcache {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<const Registry> registry() {
  return testing::test_registry();
}

constexpr std::uint32_t kLayers = 2, kQHeads = 4, kKvHeads = 2, kDim = 32;

std::unique_ptr<Cache> open_cache(const std::string& backend, const std::string& more) {
  return Cache::open(parse_config("model: {layers: 2, q_heads: 4, kv_heads: 2, head_dim: 32}\n"
                                  "backend: [" +
                                      backend + "]\ncache: {page_size: 8, capacity: 1MiB}\n" + more,
                                  "truncate_test.yaml", {}),
                     registry());
}

// The rows of one step: the same seed gives the same rows in every cache.
struct Rows {
  std::vector<float> k, v, q;
  Rows(std::uint32_t tokens, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    for (auto* x : {&k, &v}) x->resize(std::size_t{tokens} * kKvHeads * kDim);
    q.resize(std::size_t{tokens} * kQHeads * kDim);
    for (auto* x : {&k, &v, &q})
      for (float& e : *x) e = normal(rng);
  }
};

// One step of `tokens` new tokens for `id` (rows from `seed`); the attention output of every
// layer, concatenated.
std::vector<float> run_step(Cache& cache, SeqId id, std::uint32_t tokens, unsigned seed) {
  const Rows rows(tokens, seed);
  std::vector<float> out(std::size_t{kLayers} * tokens * kQHeads * kDim);
  Step step = cache.begin_step(id, tokens);
  std::int64_t kv_shape[3] = {tokens, kKvHeads, kDim}, q_shape[3] = {tokens, kQHeads, kDim};
  for (std::uint32_t layer = 0; layer < kLayers; ++layer) {
    step.append(layer, host_tensor(rows.k.data(), kv_shape), host_tensor(rows.v.data(), kv_shape));
    DLTensor o = host_tensor(out.data() + std::size_t{layer} * tokens * kQHeads * kDim, q_shape);
    step.prefill(layer, host_tensor(rows.q.data(), q_shape), o);
  }
  EXPECT_TRUE(step.finish().empty());
  return out;
}

struct TruncateCase {
  std::string backend;
  std::string format;  // a YAML value of format.k and format.v
};

void PrintTo(const TruncateCase& c, std::ostream* os) {
  *os << c.backend << " " << c.format;
}

class TruncateOn : public ::testing::TestWithParam<TruncateCase> {
 protected:
  void SetUp() override {
    const ComponentInfo* b = registry()->find(ComponentKind::backend, GetParam().backend);
    if (b == nullptr || !b->available)
      GTEST_SKIP() << GetParam().backend
                   << " cannot run here: " << (b == nullptr ? "not loaded" : b->unavailable_reason);
  }
  std::unique_ptr<Cache> open(const std::string& more = "") const {
    return open_cache(GetParam().backend, "format: {k: " + GetParam().format +
                                              ", v: " + GetParam().format + "}\n" + more);
  }
};

TEST_P(TruncateOn, ARollbackGivesWhatNeverHavingTheTokensGives) {
  const auto rolled = open(), straight = open();
  const SeqId a = rolled->add_sequence(), b = straight->add_sequence();
  run_step(*rolled, a, 11, 1);
  run_step(*straight, b, 11, 1);
  run_step(*rolled, a, 4, 2);  // the draft's tokens, rejected
  rolled->truncate(a, 11);
  EXPECT_EQ(rolled->store().length(a), 11u);
  EXPECT_EQ(rolled->stats().used_pages, straight->stats().used_pages);
  for (const unsigned seed : {3u, 4u, 5u}) {
    EXPECT_EQ(run_step(*rolled, a, seed == 3 ? 3 : 1, seed),
              run_step(*straight, b, seed == 3 ? 3 : 1, seed))
        << "step " << seed;
  }
  EXPECT_EQ(rolled->store().positions(a), straight->store().positions(b));
}

TEST_P(TruncateOn, IsRefusedForAnOpenStepsMemberAndPastTheLength) {
  const auto cache = open();
  const SeqId a = cache->add_sequence();
  run_step(*cache, a, 5, 1);
  try {
    cache->truncate(a, 6);
    FAIL() << "kept 6 of 5 tokens";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::invalid_argument);
    EXPECT_THAT(e.what(), HasSubstr("holds 5 tokens, cannot keep 6"));
  }
  {
    Step step = cache->begin_step(a, 1);
    EXPECT_THROW(cache->truncate(a, 2), Error);
  }  // dropped unfinished: undone
  EXPECT_EQ(cache->store().length(a), 5u);
  cache->truncate(a, 0);
  EXPECT_EQ(cache->store().length(a), 0u);
  EXPECT_EQ(cache->stats().used_pages, 0u);
}

// Scores only accumulate under a policy that reads them; the budget keeps it from evicting.
TEST_P(TruncateOn, HeavyHitterScoresComeBackAtAStepsBoundary) {
  if (GetParam().format.find("kivi-k") != std::string::npos)
    GTEST_SKIP() << "kivi-k drops no tokens: no heavy-hitter";
  const auto cache = open("eviction: {name: heavy-hitter, budget: 512, sinks: 1, recent: 8}\n");
  const SeqId a = cache->add_sequence();
  run_step(*cache, a, 8, 1);
  run_step(*cache, a, 1, 2);
  const std::vector<float> at_nine = cache->store().scores(a);
  ASSERT_EQ(at_nine.size(), 9u);
  run_step(*cache, a, 1, 3);
  run_step(*cache, a, 3, 4);
  ASSERT_NE(cache->store().scores(a), at_nine);
  try {
    cache->truncate(a, 11);  // inside the last step: its first query's weights are not kept apart
    FAIL() << "scores were cut inside a step";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::unsupported);
    EXPECT_THAT(e.what(), HasSubstr("attention scores can be given back only to a length where"));
  }
  EXPECT_EQ(cache->store().length(a), 13u) << "nothing changed";
  cache->truncate(a, 9);
  EXPECT_EQ(cache->store().scores(a), at_nine);
}

std::vector<TruncateCase> cases() {
  std::vector<TruncateCase> all;
  for (const std::string backend : {"cpu-tbb", "gpu-emulated"})
    for (const std::string format :
         {"fp32", "int8-per-token", "int4-group", "{name: kivi-k, group: 4}"})
      all.push_back({backend, format});
  return all;
}

INSTANTIATE_TEST_SUITE_P(Backends, TruncateOn, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<TruncateCase>& info) {
                           std::string name = info.param.backend + "_" + info.param.format;
                           std::string out;
                           for (const char c : name)
                             if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
                                 c == '-')
                               out += c == '-' ? '_' : c;
                           return out;
                         });

}  // namespace
}  // namespace kvcache
