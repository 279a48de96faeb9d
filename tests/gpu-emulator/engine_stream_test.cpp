// A step on the engine's stream (StepOptions::stream, ABI 1.10), on the emulator: with device
// tensors the host waits once per step, at finish(), or never when finish() records an event;
// the work goes onto the engine's stream; the outputs are those of a step on the backend's own
// stream, bit for bit; and the next call on the backend's own stream first waits for the engine's
// work, whose buffers it reuses.
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "emulator_support.hpp"
#include "kvcache/cache.hpp"
#include "kvcache/config.hpp"
#include "kvcache/registry.hpp"

namespace kvcache {
namespace {

std::shared_ptr<const Registry> emulator_registry() {
  return testing::emulator_registry(KVCACHE_TEST_GPU_EMULATOR);
}

const testing::EmulatorActivity& activity() {
  return testing::emulator_activity(KVCACHE_TEST_GPU_EMULATOR);
}

constexpr std::uint32_t kLayers = 2, kQHeads = 8, kKvHeads = 2, kDim = 64;

std::unique_ptr<Cache> open_cache(const std::shared_ptr<const Registry>& registry) {
  return Cache::open(parse_config("model: {layers: 2, q_heads: 8, kv_heads: 2, head_dim: 64}\n"
                                  "backend: [gpu-emulated]\n"
                                  "cache: {page_size: 16, capacity: 4MiB}\n",
                                  "engine_stream_test.yaml", {}),
                     registry);
}

// [rows, heads, kDim] float32 in the emulator's "device" memory (host memory, tagged).
struct DeviceRows {
  std::vector<float> data;
  std::vector<std::int64_t> shape;
  DLTensor tensor() {
    DLTensor t{};
    t.data = data.data();
    t.device = {kDLExtDev, 0};
    t.ndim = 3;
    t.dtype = {kDLFloat, 32, 1};
    t.shape = shape.data();
    return t;
  }
};

DeviceRows rows(std::mt19937& rng, std::uint64_t n, std::uint32_t heads) {
  std::normal_distribution<float> normal;
  DeviceRows r{std::vector<float>(n * heads * kDim), {static_cast<std::int64_t>(n), heads, kDim}};
  for (float& x : r.data) x = normal(rng);
  return r;
}

// One step of `counts` new tokens on each cache with the same inputs: `engine` on the engine's
// stream (recording `event` when given), `own` on the backend's. Returns the host waits of the
// engine's step and checks the outputs are the same.
std::uint64_t step_both(Cache& engine, Cache& own, const std::vector<SeqId>& ids,
                        const std::vector<std::uint32_t>& counts, std::mt19937& rng, void* stream,
                        void* event) {
  std::uint64_t tokens = 0;
  for (const std::uint32_t c : counts) tokens += c;
  const bool decode = tokens == ids.size();
  std::vector<DeviceRows> k, v, q;
  for (std::uint32_t layer = 0; layer < kLayers; ++layer) {
    k.push_back(rows(rng, tokens, kKvHeads));
    v.push_back(rows(rng, tokens, kKvHeads));
    q.push_back(rows(rng, tokens, kQHeads));
  }
  std::vector<DeviceRows> out_engine, out_own;
  for (std::uint32_t layer = 0; layer < kLayers; ++layer) {
    out_engine.push_back(rows(rng, tokens, kQHeads));
    out_own.push_back(rows(rng, tokens, kQHeads));
  }
  const auto run = [&](Cache& cache, const StepOptions& options, std::vector<DeviceRows>& out) {
    Step step = cache.begin_step(ids, counts, options);
    for (std::uint32_t layer = 0; layer < kLayers; ++layer) {
      step.append(layer, k[layer].tensor(), v[layer].tensor());
      DLTensor o = out[layer].tensor();
      if (decode)
        step.decode(layer, q[layer].tensor(), o);
      else
        step.prefill(layer, q[layer].tensor(), o);
    }
    EXPECT_TRUE(step.finish().empty());
  };
  run(own, {}, out_own);
  const testing::EmulatorActivity before = activity();
  run(engine, {EngineStream{stream}, event}, out_engine);
  const std::uint64_t waits = activity().synchronizations - before.synchronizations;
  EXPECT_EQ(activity().events - before.events, event != nullptr ? 1u : 0u);
  EXPECT_EQ(activity().launch_stream, stream) << "the step's kernels went onto another stream";
  for (std::uint32_t layer = 0; layer < kLayers; ++layer)
    EXPECT_EQ(out_engine[layer].data, out_own[layer].data) << "layer " << layer;
  return waits;
}

TEST(EngineStream, AStepWaitsOnceAtFinishOrNotAtAllWithAnEvent) {
  const auto registry = emulator_registry();
  const auto engine = open_cache(registry), own = open_cache(registry);
  std::vector<SeqId> ids;
  for (int i = 0; i < 2; ++i) {
    ids.push_back(engine->add_sequence());
    ASSERT_EQ(own->add_sequence(), ids.back());
  }
  std::mt19937 rng(11);
  void* const stream = reinterpret_cast<void*>(std::uintptr_t{0x5eed});
  int event_storage = 0;
  void* const event = &event_storage;
  // A ragged prefill of 40 and 25 tokens, then decode steps: each waits once, at finish().
  EXPECT_EQ(step_both(*engine, *own, ids, {40, 25}, rng, stream, nullptr), 1u);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(step_both(*engine, *own, ids, {1, 1}, rng, stream, nullptr), 1u) << "decode " << i;
  // With an event, never.
  EXPECT_EQ(step_both(*engine, *own, ids, {1, 1}, rng, stream, event), 0u);
  EXPECT_EQ(step_both(*engine, *own, ids, {1, 1}, rng, stream, event), 0u);
  // The vendor's default stream (a null handle) is a stream like any other: moving to it waits
  // once for the work left on the other, whose buffers it reuses.
  EXPECT_EQ(step_both(*engine, *own, ids, {1, 1}, rng, nullptr, event), 1u);
  EXPECT_EQ(step_both(*engine, *own, ids, {1, 1}, rng, nullptr, event), 0u);
  // The engine's work was left unwaited: the next step on the backend's own stream waits for it
  // once before its first call, then once per call (2 appends and 2 runs), as a step without an
  // engine stream always does.
  const auto own_step_waits = [&] {
    const std::uint64_t before = activity().synchronizations;
    Step step = engine->begin_step(ids, std::vector<std::uint32_t>{1, 1});
    for (std::uint32_t layer = 0; layer < kLayers; ++layer) {
      DeviceRows k = rows(rng, 2, kKvHeads), v = rows(rng, 2, kKvHeads);
      DeviceRows q = rows(rng, 2, kQHeads), out = rows(rng, 2, kQHeads);
      step.append(layer, k.tensor(), v.tensor());
      DLTensor o = out.tensor();
      step.decode(layer, q.tensor(), o);
    }
    (void)step.finish();
    return activity().synchronizations - before;
  };
  EXPECT_EQ(own_step_waits(), 2u * kLayers + 1);
  EXPECT_EQ(own_step_waits(), 2u * kLayers);
}

TEST(EngineStream, AnEventWithoutAStreamIsRefused) {
  const auto registry = emulator_registry();
  const auto cache = open_cache(registry);
  const SeqId id = cache->add_sequence();
  int event = 0;
  try {
    (void)cache->begin_step(std::vector<SeqId>{id}, std::vector<std::uint32_t>{1},
                            StepOptions{{}, &event});
    FAIL() << "an event without a stream was taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("engine's stream"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache->store().length(id), 0u);
}

}  // namespace
}  // namespace kvcache
