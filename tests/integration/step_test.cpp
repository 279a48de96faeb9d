// The engine's step (kvcache/step.hpp): planned once, run for every layer. On cpu-tbb, the GPU
// backends and their emulator (which plan themselves), and a backend of ABI 1.3 (whose steps the
// host plans and runs through the per-layer entry points) a step gives exactly what the per-layer
// calls give; calls out of order are errors that change nothing; begin_step's evictions are
// reported at once; a plan is refused once the store changed shape; Cache::open takes a path or a
// YAML text.
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpu_emulator_plugin.hpp"
#include "kvcache/cache.hpp"
#include "kvcache/config.hpp"
#include "kvcache/registry.hpp"

namespace kvcache {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<const Registry> registry() {
  static const auto r = [] {
    PluginSettings settings;
    // Not required: a build carried to a GPU machine (tools/gpu-stage.sh) lacks it, and skips it.
    settings.paths.push_back({KVCACHE_TEST_ABI_1_3_ATTENTION, false, {}});
    if (const std::string emulator = testing::gpu_emulator_plugin(); !emulator.empty())
      settings.paths.push_back({emulator, true, {}});
    return Registry::load(settings);
  }();
  return r;
}

// Three layers, GQA groups of 3, pages of 8 tokens.
std::unique_ptr<Cache> open_cache(const std::string& backend, const std::string& more = "") {
  return Cache::open(parse_config("model: {layers: 3, q_heads: 6, kv_heads: 2, head_dim: 32}\n"
                                  "backend: [" +
                                      backend +
                                      "]\n"
                                      "cache: {page_size: 8, capacity: 1MiB}\n" +
                                      more,
                                  "step_test.yaml", {}),
                     registry());
}

std::vector<float> random_rows(std::mt19937& rng, std::size_t n) {
  std::normal_distribution<float> normal;
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

class StepOn : public ::testing::TestWithParam<std::string> {};

// A ragged prefill step (5, 9 and 1 new tokens) and four decode steps, through a step on one
// cache and through the per-layer calls on another: the same outputs, bit for bit.
TEST_P(StepOn, GivesWhatThePerLayerCallsGive) {
  const ComponentInfo* backend = registry()->find(ComponentKind::backend, GetParam());
  if (backend == nullptr || !backend->available)
    GTEST_SKIP() << GetParam() << " cannot run here: "
                 << (backend == nullptr ? "not loaded" : backend->unavailable_reason);
  const auto stepped = open_cache(GetParam());
  const auto layered = open_cache(GetParam());
  const ModelShape& m = stepped->model();
  std::vector<SeqId> ids;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(stepped->add_sequence());
    ASSERT_EQ(layered->add_sequence(), ids.back());
  }
  std::mt19937 rng(7);
  const std::vector<std::vector<std::uint32_t>> steps = {
      {5, 9, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}};
  for (const std::vector<std::uint32_t>& counts : steps) {
    const bool decode = counts == std::vector<std::uint32_t>{1, 1, 1};
    Step step = stepped->begin_step(ids, counts);
    ASSERT_TRUE(step.report().empty());
    ASSERT_EQ(step.tokens(), decode ? 3u : 15u);
    (void)layered->reserve(ids, counts);
    const auto rows = static_cast<std::int64_t>(step.tokens());
    for (std::uint32_t layer = 0; layer < m.layers; ++layer) {
      const std::vector<float> k = random_rows(rng, rows * m.kv_heads * m.head_dim);
      const std::vector<float> v = random_rows(rng, k.size());
      const std::vector<float> q = random_rows(rng, rows * m.q_heads * m.head_dim);
      std::vector<float> a(q.size()), b(q.size());
      const Tensor kt = Tensor::host(k.data(), {rows, m.kv_heads, m.head_dim});
      const Tensor vt = Tensor::host(v.data(), {rows, m.kv_heads, m.head_dim});
      const Tensor qt = Tensor::host(q.data(), {rows, m.q_heads, m.head_dim});
      Tensor at = Tensor::host(a.data(), {rows, m.q_heads, m.head_dim});
      Tensor bt = Tensor::host(b.data(), {rows, m.q_heads, m.head_dim});
      step.append(layer, kt, vt);
      layered->append(layer, ids, counts, kt, vt);
      if (decode) {
        step.decode(layer, qt, at);
        layered->decode(layer, ids, qt, bt);
      } else {
        step.prefill(layer, qt, at);
        layered->prefill(layer, ids, counts, qt, bt);
      }
      ASSERT_EQ(a, b) << "layer " << layer;
    }
    EXPECT_TRUE(step.finish().empty());
    EXPECT_TRUE(layered->end_step().empty());
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, StepOn,
                         ::testing::Values("cpu-tbb", "test-abi-1-3-attention", "gpu-emulated",
                                           "cuda", "hip"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

// Runs `call` expecting Error(invalid_argument) whose message holds `text`.
template <class Call>
void refused(Call&& call, const std::string& text) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one saying: " << text;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::invalid_argument) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(text));
  }
}

TEST(Step, CallsOutOfOrderAreErrorsThatChangeNothing) {
  const auto cache = open_cache("cpu-tbb");
  const ModelShape& m = cache->model();
  const SeqId id = cache->add_sequence();
  std::mt19937 rng(3);
  const auto kv = random_rows(rng, 4 * m.kv_heads * m.head_dim);
  const auto q = random_rows(rng, 4 * m.q_heads * m.head_dim);
  std::vector<float> out(q.size());
  const auto kv_of = [&](std::int64_t rows) {
    return Tensor::host(kv.data(), {rows, m.kv_heads, m.head_dim});
  };
  const auto q_of = [&](std::int64_t rows) {
    return Tensor::host(q.data(), {rows, m.q_heads, m.head_dim});
  };
  Tensor out1 = Tensor::host(out.data(), {1, m.q_heads, m.head_dim});
  {
    Step prompt = cache->begin_step(id, 4);
    refused([&] { prompt.decode(0, q_of(4), out1); }, "more than one new token");
    for (std::uint32_t layer = 0; layer < m.layers; ++layer)
      prompt.append(layer, kv_of(4), kv_of(4));
    (void)prompt.finish();
  }
  Step step = cache->begin_step(id);
  refused([&] { step.decode(0, q_of(1), out1); }, "layer 0 has not been appended");
  EXPECT_EQ(cache->store().written(id, 0), 4u);
  step.append(0, kv_of(1), kv_of(1));
  refused([&] { step.append(0, kv_of(1), kv_of(1)); }, "layer 0 was already appended");
  EXPECT_EQ(cache->store().written(id, 0), 5u);
  step.decode(0, q_of(1), out1);
  refused([&] { step.decode(0, q_of(1), out1); }, "layer 0 was already attended");
  refused([&] { step.append(3, kv_of(1), kv_of(1)); }, "layer 3 out of range");
  // While the step is open the Cache refuses what would change its sequences, and the stepping
  // calls of the thread that opened it; other sequences change freely.
  refused([&] { (void)cache->reserve(std::vector<SeqId>{id}, std::vector<std::uint32_t>{1}); },
          "a step is open");
  refused([&] { cache->release(id); }, "is in the open step");
  refused([&] { (void)cache->fork(id); }, "is in the open step");
  const SeqId other = cache->add_sequence();
  cache->release(cache->fork(other));
  cache->release(other);
  refused([&] { (void)cache->begin_step(id); }, "a step is open");
  refused([&] { cache->decode(0, std::vector<SeqId>{id}, q_of(1), out1); }, "a step is open");
  EXPECT_EQ(cache->store().length(id), 5u);
  // finish() wants every layer appended, and leaves the step open when one is not.
  refused([&] { (void)step.finish(); }, "layer 1 of 3 has not been appended");
  step.append(1, kv_of(1), kv_of(1));
  step.append(2, kv_of(1), kv_of(1));
  (void)step.finish();
  refused([&] { step.append(0, kv_of(1), kv_of(1)); }, "the step is finished");
  refused([&] { (void)step.finish(); }, "the step is finished");
  // The Cache is free again; a step dropped unfinished frees it too.
  { Step dropped = cache->begin_step(id); }
  EXPECT_NO_THROW(cache->release(id)) << "a dropped step closes";
}

// begin_step's evictions are in report() at once, and a member of the batch that the policy
// preempted leaves the step's batch. Without a policy, a step that does not fit reserves nothing.
TEST(Step, ReportsWhatBeginStepEvictedAndReservesAllOrNothing) {
  const auto cache = open_cache("cpu-tbb", "eviction: oldest-first\n");
  const ModelShape& m = cache->model();
  const SeqId old = cache->add_sequence();
  const SeqId young = cache->add_sequence();
  const auto fill = [&](Step& step) {
    const auto rows = static_cast<std::int64_t>(step.tokens());
    const std::vector<float> kv(rows * m.kv_heads * m.head_dim, 0.5f);
    for (std::uint32_t layer = 0; layer < m.layers; ++layer)
      step.append(layer, Tensor::host(kv.data(), {rows, m.kv_heads, m.head_dim}),
                  Tensor::host(kv.data(), {rows, m.kv_heads, m.head_dim}));
  };
  // Both fill all but four pages or five; then 3 more pages each do not fit.
  const std::uint64_t pages = cache->stats().total_pages;
  const auto half = static_cast<std::uint32_t>(8 * ((pages - 4) / 2));
  {
    Step first =
        cache->begin_step(std::vector<SeqId>{old, young}, std::vector<std::uint32_t>{half, half});
    fill(first);
    EXPECT_TRUE(first.finish().empty());
  }
  Step second =
      cache->begin_step(std::vector<SeqId>{old, young}, std::vector<std::uint32_t>{24, 24});
  EXPECT_EQ(second.report().preempted, std::vector<SeqId>{old});
  EXPECT_EQ(std::vector<SeqId>(second.sequences().begin(), second.sequences().end()),
            std::vector<SeqId>{young});
  EXPECT_EQ(second.tokens(), 24u);
  fill(second);
  EXPECT_EQ(second.finish().preempted, std::vector<SeqId>{old}) << "finish() returns it all";

  const auto strict = open_cache("cpu-tbb");
  const SeqId id = strict->add_sequence();
  try {
    (void)strict->begin_step(id, static_cast<std::uint32_t>(8 * pages + 1));
    ADD_FAILURE() << "more tokens than the pages hold";
  } catch (const CacheFull& e) {
    EXPECT_THAT(e.what(), HasSubstr("nothing was reserved"));
  }
  EXPECT_EQ(strict->store().length(id), 0u);
  EXPECT_NO_THROW((void)strict->begin_step(id, 8)) << "no step was left open";
}

// A backend that does not declare engine_streams (ABI 1.10), or predates it, refuses a step on
// the engine's stream at begin_step, naming itself, with nothing reserved; gpu-emulated takes it
// (tests/gpu-emulator/engine_stream_test.cpp counts its waits).
TEST(Step, AnEngineStreamIsRefusedByABackendThatTakesNone) {
  for (const char* backend : {"cpu-tbb", "test-abi-1-3-attention"}) {
    const ComponentInfo* info = registry()->find(ComponentKind::backend, backend);
    if (info == nullptr) continue;  // the ABI 1.3 plugin is not carried to GPU machines
    const auto cache = open_cache(backend);
    const SeqId id = cache->add_sequence();
    try {
      (void)cache->begin_step(std::vector<SeqId>{id}, std::vector<std::uint32_t>{4},
                              StepOptions{EngineStream{}, nullptr});
      ADD_FAILURE() << backend << " took an engine stream";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::unsupported) << backend;
      EXPECT_THAT(e.what(), HasSubstr("takes no engine stream")) << backend;
      EXPECT_THAT(e.what(), HasSubstr(backend));
    }
    EXPECT_EQ(cache->store().length(id), 0u) << backend;
    EXPECT_NO_THROW((void)cache->begin_step(id, 4)) << backend << ": no step was left open";
  }
}

// A plan is for the sequences' shape when it was made: after a reserve, run() refuses it.
TEST(Step, APlanIsRefusedOnceItsSequencesChangedShape) {
  const Config config = parse_config(
      "model: {layers: 1, q_heads: 2, kv_heads: 1, head_dim: 32}\ncache: {capacity: 1MiB}\n",
      "step_test.yaml", {});
  const auto backend = registry()->create_backend("cpu-tbb");
  const auto store = backend->create_store(store_spec(config));
  const auto attention = backend->create_attention();
  const SeqId id = store->create_sequence();
  const std::uint32_t four = 4;
  store->reserve(std::vector<SeqId>{id}, std::span<const std::uint32_t>(&four, 1));
  std::vector<float> kv(4 * 32, 1.0f), q(2 * 32, 1.0f), out(q.size());
  store->append(0, std::vector<SeqId>{id}, std::span<const std::uint32_t>(&four, 1),
                Tensor::host(kv.data(), {4, 1, 32}), Tensor::host(kv.data(), {4, 1, 32}));
  const PositionRange all{0, 4};
  const std::uint32_t one = 1;
  StepRequest request;
  const SeqId ids[] = {id};
  request.sequences = ids;
  request.visible = {
      std::span<const PositionRange>(&all, 1), std::span<const std::uint32_t>(&one, 1), 1, {}};
  const auto plan = attention->plan(*store, request);
  Tensor o = Tensor::host(out.data(), {1, 2, 32});
  attention->run(*store, *plan, 0, Tensor::host(q.data(), {1, 2, 32}), o);
  EXPECT_FLOAT_EQ(out[0], 1.0f) << "the mean of four values of 1";
  // Other sequences may change shape meanwhile (what another thread's calls do to the store).
  const SeqId other = store->create_sequence();
  store->reserve(std::vector<SeqId>{other}, std::span<const std::uint32_t>(&four, 1));
  store->release(other);
  attention->run(*store, *plan, 0, Tensor::host(q.data(), {1, 2, 32}), o);
  store->reserve(std::vector<SeqId>{id}, std::span<const std::uint32_t>(&one, 1));
  refused(
      [&] {
        attention->run(*store, *plan, 0, Tensor::host(q.data(), {1, 2, 32}), o);
      },
      "the step's plan is stale");
}

TEST(CacheOpen, TakesAConfigFileOrAYamlText) {
  const auto from_text = Cache::open(
      "model: {layers: 1, q_heads: 2, kv_heads: 1, head_dim: 64}\n"
      "backend: [cpu-tbb]\ncache: {capacity: 1MiB}\n");
  EXPECT_EQ(from_text->model().head_dim, 64u);
  const auto from_file =
      Cache::open(std::string(KVCACHE_TEST_SOURCE_DIR) + "/integration/configs/streaming.yaml");
  EXPECT_EQ(from_file->backend(), "cpu-tbb");
  try {
    (void)Cache::open("cache: {page_sise: 16}");
    ADD_FAILURE() << "a misspelt key must be refused";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("<yaml text>:1:"));
    EXPECT_THAT(e.what(), HasSubstr("page_size"));
  }
  EXPECT_THROW((void)Cache::open("no-such-config.yaml"), ConfigError);
}

TEST(Tensor, CopiesCarryTheirOwnShape) {
  float data[24] = {};
  std::optional<Tensor> first = Tensor::host(data, {2, 3, 4});
  const Tensor copy = *first;
  first.reset();
  EXPECT_EQ(copy.dl().ndim, 3);
  EXPECT_EQ(copy.dl().shape[0], 2);
  EXPECT_EQ(copy.dl().shape[2], 4);
  EXPECT_THROW((void)Tensor::host(data, {}), Error);
}

}  // namespace
}  // namespace kvcache
