// `kvcache bench tier`: the remote tier against the store of the config's `remote:` section.
// One host writes a prompt of N pages (write GB/s of values); fresh hosts look up prefixes of 16,
// 128 and 1,024 pages (latency p50/p99, probes only) and pull them (GB/s of values, each page
// verified and imported); and, per prompt length, pulling is timed against recomputing the same
// pages on the config's backend (appends and causal prefill attention over every layer, the
// cache's share of prefill: the model's own matrix products would only make pulling win sooner).
#pragma once

#include <cstdint>
#include <memory>

#include <nlohmann/json.hpp>

#include "kvcache/config.hpp"
#include "kvcache/registry.hpp"

namespace kvcache::tool {

struct TierBenchOptions {
  std::uint32_t pages = 1024;  // the prompt's length in pages
  std::uint32_t repeats = 20;  // of each lookup and pull
};

nlohmann::json run_tier_benchmark(Config config, const std::shared_ptr<const Registry>& registry,
                                  const TierBenchOptions& options);

}  // namespace kvcache::tool
