// One layer of attention on a backend, timed, beside the machine's read bandwidth measured in
// the same run: what `kvcache bench attention` reports. One query token per sequence is decode;
// more are a prefill chunk (the last cached tokens as queries).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "kvcache/registry.hpp"
#include "mask_spec.hpp"

namespace kvcache::tool {

struct AttentionBenchOptions {
  std::string backend = "cpu-tbb";
  std::string k_format = "fp16";
  std::string v_format = "fp16";
  nlohmann::json k_options = nlohmann::json::object();
  nlohmann::json v_options = nlohmann::json::object();
  std::uint64_t tokens = 4096;  // cached tokens per sequence
  std::uint32_t batch = 1;
  std::uint32_t queries = 1;   // query tokens per sequence
  std::uint32_t q_heads = 32;  // Llama-3-8B
  std::uint32_t kv_heads = 8;
  std::uint32_t head_dim = 128;
  std::uint32_t page_size = 16;
  ComponentChoice mask{.name = "causal"};
  int threads = 0;  // 0: all
  double min_seconds = 1.0;
  // Calls take turns over enough layers that the KV they read is at least 8x the last-level
  // cache, as a model's layers do; hot: one layer, read again and again from the cache.
  bool hot = false;
};

struct AttentionBenchResult {
  std::string device;          // the backend's first device, as it names itself
  std::uint64_t kv_bytes = 0;  // K and V bytes some query sees, per call, scales included
  double seconds = 0.0;        // median per call, on a step's plan made before
  double plan_seconds = 0.0;   // median of planning that step
  double gbps = 0.0;
  double read_bandwidth_gbps = 0.0;
  std::string bandwidth_probe;  // "host read", or "device copy" for a GPU backend
  double bandwidth_fraction = 0.0;
  double tokens_per_second = 0.0;  // query tokens (decode: steps x batch) per second, this layer
  double gflops = 0.0;  // q.k and p.v multiply-adds x 2 over the visible keys, per second
  // The host's FMA peak over the same threads (fma_peak.hpp) and gflops' fraction of it; 0 for a
  // GPU backend (no probe) or a CPU without FMA.
  double fma_peak_gflops = 0.0;
  double flop_fraction = 0.0;
  std::uint64_t calls = 0;
  int threads = 0;
  std::uint32_t layers = 1;       // that the calls take turns over
  std::uint64_t cache_bytes = 0;  // the last-level cache the rotation outgrows
};

AttentionBenchResult run_attention_benchmark(const Registry& registry,
                                             const AttentionBenchOptions& options);

nlohmann::json to_json(const AttentionBenchOptions& options, const AttentionBenchResult& result);

}  // namespace kvcache::tool
