// What the hybrid tests share: a three-layer cache of a sliding group (layers 0 and 1) and a
// global one (layer 2), the rows of a step, a step through every layer, and the fixture that
// runs on each backend that can.
#pragma once

#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvcache/cache.hpp"
#include "kvcache/config.hpp"
#include "kvcache/host_tensor.hpp"
#include "test_registry.hpp"

namespace kvcache::hybrid {

using ::testing::HasSubstr;

constexpr std::uint32_t kLayers = 3, kQHeads = 4, kKvHeads = 2, kDim = 32;

inline std::string hybrid_yaml(const std::string& backend, const std::string& more = "",
                               const std::string& local = "", const std::string& prefix = "false") {
  return "model: {layers: 3, q_heads: 4, kv_heads: 2, head_dim: 32}\n"
         "backend: [" +
         backend +
         "]\n"
         "cache: {page_size: 8, capacity: 1MiB, prefix_caching: " +
         prefix + "}\n" + more +
         "layers:\n"
         "  groups:\n"
         "    local: {mask: {name: sliding-window, window: 20}" +
         local +
         "}\n"
         "    global: {}\n"
         "  pattern: [local x2, global]\n"
         "  context: 64\n";
}

inline std::unique_ptr<Cache> open_yaml(const std::string& yaml) {
  return Cache::open(parse_config(yaml, "hybrid_test.yaml", {}), testing::test_registry());
}

// The rows of a step of `tokens` new tokens, from `seed`, and room for every layer's output.
struct Rows {
  std::vector<float> k, v, q, out;
  std::int64_t kv_shape[3], q_shape[3];
  Rows(std::uint32_t tokens, unsigned seed)
      : kv_shape{tokens, kKvHeads, kDim}, q_shape{tokens, kQHeads, kDim} {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    k.resize(std::size_t{tokens} * kKvHeads * kDim);
    v.resize(k.size());
    q.resize(std::size_t{tokens} * kQHeads * kDim);
    out.resize(kLayers * q.size());
    for (auto* x : {&k, &v, &q})
      for (float& e : *x) e = normal(rng);
  }
  // The rows of `whole`'s tokens from `from` on.
  Rows(const Rows& whole, std::uint32_t from)
      : kv_shape{whole.kv_shape[0] - from, kKvHeads, kDim},
        q_shape{whole.q_shape[0] - from, kQHeads, kDim} {
    const auto tail = [&](const std::vector<float>& x, std::size_t per_token) {
      return std::vector<float>(x.begin() + static_cast<std::ptrdiff_t>(from * per_token), x.end());
    };
    k = tail(whole.k, kKvHeads * kDim);
    v = tail(whole.v, kKvHeads * kDim);
    q = tail(whole.q, kQHeads * kDim);
    out.resize(kLayers * q.size());
  }
  DLTensor k_of() { return host_tensor(k.data(), kv_shape); }
  DLTensor v_of() { return host_tensor(v.data(), kv_shape); }
  DLTensor q_of() { return host_tensor(q.data(), q_shape); }
  DLTensor out_of(std::uint32_t layer) {
    return host_tensor(out.data() + layer * q.size(), q_shape);
  }
};

// One step of `rows` for `id`: every layer's output, in order.
// What the step evicted goes to `report`; without one, the step must evict nothing.
inline std::vector<float> run_rows(Cache& cache, SeqId id, Rows rows,
                                   EvictionReport* report = nullptr) {
  Step step = cache.begin_step(id, static_cast<std::uint32_t>(rows.q_shape[0]));
  for (std::uint32_t layer = 0; layer < kLayers; ++layer) {
    step.append(layer, rows.k_of(), rows.v_of());
    DLTensor o = rows.out_of(layer);
    step.prefill(layer, rows.q_of(), o);
  }
  const EvictionReport evicted = step.finish();
  if (report != nullptr)
    report->merge(evicted);
  else
    EXPECT_TRUE(evicted.empty());
  return rows.out;
}

inline std::vector<float> run_step(Cache& cache, SeqId id, std::uint32_t tokens, unsigned seed,
                                   EvictionReport* report = nullptr) {
  return run_rows(cache, id, Rows(tokens, seed), report);
}

class HybridOn : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const ComponentInfo* b = testing::test_registry()->find(ComponentKind::backend, GetParam());
    if (b == nullptr || !b->available)
      GTEST_SKIP() << GetParam()
                   << " cannot run here: " << (b == nullptr ? "not loaded" : b->unavailable_reason);
  }
  std::unique_ptr<Cache> open(const std::string& more = "") const {
    return open_yaml(hybrid_yaml(GetParam(), more));
  }
};

}  // namespace kvcache::hybrid
