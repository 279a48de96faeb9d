// `kvcache bench`: a serving simulation through the Cache facade on a real backend. Requests
// arrive (a seeded ShareGPT-like synthetic mix, or a JSONL trace), are batched continuously,
// and each step appends K/V and runs attention for the simulated layers; eviction and
// preemption follow the config. Reports throughput, attention GB/s, KV utilization against a
// contiguous max-length reservation (as in the vLLM paper), prefix hits and evictions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvcache/config.hpp"
#include "kvcache/registry.hpp"
#include "request_trace.hpp"

namespace kvcache::tool {

struct SimulationOptions {
  std::uint32_t requests = 48;
  std::uint64_t seed = 1;
  double arrival_rate = 50.0;             // requests per simulated second
  std::uint32_t simulated_layers = 2;     // layers that get K/V and attention each step
  std::uint32_t max_batch = 32;           // running sequences at most
  std::uint32_t baseline_max_len = 2048;  // what a contiguous allocator reserves per request
  std::uint32_t prefill_chunk = 0;        // prompt tokens a step computes at most; 0: all
  std::string trace;                      // JSONL file; empty: synthetic
  std::string chart;                      // SVG file to write; empty: none
  bool progress = false;
};

// Runs the simulation; returns the report (keys listed in the README).
nlohmann::json run_serving_simulation(const Config& config,
                                      std::shared_ptr<const Registry> registry,
                                      const SimulationOptions& options);

}  // namespace kvcache::tool
