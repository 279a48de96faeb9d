// The GPU backend's paths for tensors already in device memory, on the emulator (whose "device"
// is host memory tagged kDLExtDev): K/V appended from the device, q read and the output written
// in place on the device, in float32 and float16, give exactly what host tensors give; and what a
// layer of a step asks of the device: one launch.
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "emulator_support.hpp"

#include "kvcache/host_tensor.hpp"
#include "kvcache/numeric.hpp"
#include "kvcache/reference_attention.hpp"
#include "kvcache/registry.hpp"

namespace kvcache {
namespace {

std::shared_ptr<const Registry> emulator_registry() {
  return testing::emulator_registry(KVCACHE_TEST_GPU_EMULATOR);
}

// A store of pages of 16 and 8 MiB.
StoreSpec spec_of(const ModelShape& model, const char* k_format, const char* v_format) {
  StoreSpec spec;
  spec.model = model;
  spec.page_size = 16;
  spec.k_format = k_format;
  spec.v_format = v_format;
  spec.capacity_bytes = 8 << 20;
  return spec;
}

DLTensor on_device(DLTensor t) {
  t.device = {kDLExtDev, 0};
  return t;
}

TEST(EmulatedDeviceTensors, DeviceTensorsAreUsedInPlaceWithTheSameResults) {
  const auto registry = emulator_registry();
  const auto backend = registry->create_backend("gpu-emulated");
  const StoreSpec spec = spec_of({1, 8, 2, 64}, "int8-per-token", "fp16");
  const auto host_store = backend->create_store(spec);
  const auto device_store = backend->create_store(spec);
  const auto attention = backend->create_attention();

  const std::uint32_t n = 40;
  std::mt19937 rng(4);
  std::normal_distribution<float> normal;
  std::vector<float> k(n * 2 * 64), v(k.size()), q(8 * 64);
  for (float& x : k) x = normal(rng);
  for (float& x : v) x = normal(rng);
  for (float& x : q) x = normal(rng);
  // The same values as float16 input for the device store: identical after its fp16 rounding
  // only where the format keeps fp16, so compare K/V as stored (gather) and outputs at 1e-6.
  std::vector<std::uint16_t> v16(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) v16[i] = fp16_from_float(v[i]);
  std::int64_t kv_shape[3] = {n, 2, 64}, q_shape[3] = {1, 8, 64};
  const std::vector<std::uint32_t> counts{n};
  const SeqId a = host_store->create_sequence(), b = device_store->create_sequence();
  host_store->reserve(std::vector<SeqId>{a}, counts);
  device_store->reserve(std::vector<SeqId>{b}, counts);
  host_store->append(0, std::vector<SeqId>{a}, counts, host_tensor(k.data(), kv_shape),
                     host_tensor(v.data(), kv_shape));
  DLTensor v_half = host_tensor(v.data(), kv_shape);
  v_half.data = v16.data();
  v_half.dtype = {kDLFloat, 16, 1};
  device_store->append(0, std::vector<SeqId>{b}, counts, on_device(host_tensor(k.data(), kv_shape)),
                       on_device(v_half));
  for (const bool value : {false, true})
    for (std::uint32_t page = 0; page < 3; ++page)
      EXPECT_EQ(host_store->read_tile(page, 0, 1, value),
                device_store->read_tile(page, 0, 1, value))
          << "page " << page << (value ? " V" : " K");

  const std::vector<PositionRange> ranges{{0, n}};
  const std::vector<std::uint32_t> range_counts{1};
  std::vector<float> want(q.size()), got(q.size());
  std::vector<std::uint16_t> got16(q.size());
  for (const bool device : {false, true}) {
    const auto& store = device ? device_store : host_store;
    DLTensor qt = host_tensor(q.data(), q_shape),
             ot = host_tensor((device ? got : want).data(), q_shape);
    if (device) {
      qt = on_device(qt);
      ot = on_device(ot);
    }
    const std::vector<SeqId> ids{device ? b : a};
    StepRequest r;
    r.sequences = ids;
    r.visible = {ranges, range_counts, 1, {}};
    const std::unique_ptr<StepPlan> plan = attention->plan(*store, r);
    attention->run(*store, *plan, 0, qt, ot);
    if (device) {  // and a float16 output written in place on the device
      ot.data = got16.data();
      ot.dtype = {kDLFloat, 16, 1};
      attention->run(*store, *plan, 0, qt, ot);
    }
  }
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i], want[i]) << i;
    EXPECT_EQ(got16[i], fp16_from_float(want[i])) << i;
  }
}

using Activity = testing::EmulatorActivity;
const Activity& emulator_activity() {
  return testing::emulator_activity(KVCACHE_TEST_GPU_EMULATOR);
}

// Batch 1, 300 tokens: the emulator's 2 multiprocessors ask for 32 items, so each (KV head, head
// chunk) is split into 3 items whose last one merges them. Each layer of a planned step is one
// launch that attends and merges; device tensors add no copy, host ones one each way.
TEST(EmulatedDeviceTensors, AStepLayerIsOneLaunchThatMergesItsSplits) {
  const auto registry = emulator_registry();
  const auto backend = registry->create_backend("gpu-emulated");
  const StoreSpec spec = spec_of({2, 8, 2, 64}, "fp16", "fp16");
  const auto store = backend->create_store(spec);
  const auto attention = backend->create_attention();
  const std::uint32_t n = 300;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> k(n * 2 * 64), v(k.size()), q(8 * 64);
  std::int64_t kv_shape[3] = {n, 2, 64}, q_shape[3] = {1, 8, 64};
  const SeqId id = store->create_sequence();
  const std::vector<SeqId> ids{id};
  store->reserve(ids, std::vector<std::uint32_t>{n});
  for (std::uint32_t layer = 0; layer < 2; ++layer) {
    for (float& x : k) x = normal(rng);
    for (float& x : v) x = normal(rng);
    store->append(layer, ids, std::vector<std::uint32_t>{n}, host_tensor(k.data(), kv_shape),
                  host_tensor(v.data(), kv_shape));
  }
  for (float& x : q) x = normal(rng);

  const std::vector<PositionRange> ranges{{0, n}};
  const std::vector<std::uint32_t> range_counts{1};
  StepRequest request;
  request.sequences = ids;
  request.visible = {ranges, range_counts, 1, {}};
  const auto plan = attention->plan(*store, request);
  const Activity& activity = emulator_activity();
  std::vector<float> out(q.size()), want(q.size()), keys(k.size()), values(v.size());
  std::vector<Position> positions(n);
  for (std::uint32_t i = 0; i < n; ++i) positions[i] = i;
  // Layer 1, then 0 twice: each run finds the merge's counters as the last one left them.
  for (const std::uint32_t layer : {1u, 0u, 0u})
    for (const bool device : {true, false}) {
      DLTensor qt = host_tensor(q.data(), q_shape), ot = host_tensor(out.data(), q_shape);
      if (device) {
        qt = on_device(qt);
        ot = on_device(ot);
      }
      std::fill(out.begin(), out.end(), NAN);
      const Activity before = activity;
      attention->run(*store, *plan, layer, qt, ot);
      EXPECT_EQ(activity.launches - before.launches, 1u) << "layer " << layer;
      EXPECT_EQ(activity.uploads - before.uploads, device ? 0u : 1u) << "layer " << layer;
      EXPECT_EQ(activity.downloads - before.downloads, device ? 0u : 1u) << "layer " << layer;
      EXPECT_EQ(activity.synchronizations - before.synchronizations, 1u) << "layer " << layer;

      DLTensor kt = host_tensor(keys.data(), kv_shape), vt = host_tensor(values.data(), kv_shape);
      store->gather(layer, id, kt, vt);
      reference::attention({8, 2, 64}, q, keys, values, positions, ranges, 0.125f, want);
      for (std::size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(out[i], want[i], 1e-4 + 1e-4 * std::fabs(want[i]))
            << "layer " << layer << " at " << i;
    }
}

TEST(EmulatedDeviceTensors, ADeviceThatDoesNotExistIsRefused) {
  try {
    emulator_registry()->create_backend("gpu-emulated", {{"device", 3}});
    FAIL() << "device 3 of 1 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("option 'device' is 3, but 1 devices exist"),
              std::string::npos)
        << e.what();
  }
}

// Lanes read rows in chunks of 8 elements: the plugin declares multiples of 8 up to 256, and a
// store of another head_dim is refused up front, not at its first attention call.
TEST(EmulatedDeviceTensors, HeadDimsAreMultiplesOfEightUpTo256) {
  const auto registry = emulator_registry();
  const ComponentInfo* info = registry->find(ComponentKind::backend, "gpu-emulated");
  ASSERT_NE(info, nullptr);
  const std::vector<std::uint32_t>& dims = info->capabilities.head_dims;
  ASSERT_EQ(dims.size(), 32u);
  EXPECT_EQ(dims.front(), 8u);
  EXPECT_EQ(dims.back(), 256u);
  const auto backend = registry->create_backend("gpu-emulated");
  for (const std::uint32_t dim : {12u, 264u}) {
    StoreSpec spec;
    spec.model = {1, 4, 2, dim};
    spec.capacity_bytes = 1 << 20;
    try {
      backend->create_store(spec);
      FAIL() << "head_dim " << dim << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::unsupported);
      EXPECT_NE(std::string(e.what()).find("head_dim " + std::to_string(dim) +
                                           " is not a multiple of 8 up to 256"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace kvcache
