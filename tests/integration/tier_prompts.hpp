// A tiny model's prompts for the remote tier's tests: its config, prompts, and K/V rows that
// depend only on (token, position, layer, head), so that equal prompts give equal K/V in any
// process, as a real model's do.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kvcache/cache.hpp"
#include "kvcache/tensor.hpp"

namespace kvcache::testing {

constexpr std::uint32_t kLayers = 2, kQ = 4, kKv = 2, kDim = 32, kPage = 16;

// The tiny model's config; `remote` is the inside of its remote section.
inline std::string tiny_config(const std::string& remote, const std::string& format = "fp16",
                               const std::string& capacity = "1MiB",
                               const std::string& backend = "cpu-tbb") {
  return "model: {layers: 2, q_heads: 4, kv_heads: 2, head_dim: 32}\nbackend: [" + backend +
         "]\ncache: {page_size: 16, capacity: " + capacity + "}\nformat: " + format +
         "\nremote: {" + remote + "}\n";
}

inline std::vector<float> rows(std::span<const std::int32_t> tokens, Position first,
                               std::uint32_t layer, bool value) {
  std::vector<float> out;
  for (std::size_t t = 0; t < tokens.size(); ++t)
    for (std::uint32_t h = 0; h < kKv; ++h) {
      std::mt19937 rng(static_cast<std::uint32_t>(tokens[t] * 7919 + (first + t) * 131 +
                                                  layer * 17 + h * 3 + (value ? 1 : 0)));
      std::normal_distribution<float> normal;
      for (std::uint32_t d = 0; d < kDim; ++d) out.push_back(normal(rng));
    }
  return out;
}

// Appends the K/V of `tokens` at positions from `first` to sequence `id`, every layer.
inline void write(Cache& cache, SeqId id, std::span<const std::int32_t> tokens, Position first) {
  auto step = cache.begin_step(id, static_cast<std::uint32_t>(tokens.size()));
  const auto n = static_cast<std::int64_t>(tokens.size());
  for (std::uint32_t layer = 0; layer < kLayers; ++layer) {
    const std::vector<float> k = rows(tokens, first, layer, false),
                             v = rows(tokens, first, layer, true);
    step.append(layer, Tensor::host(k.data(), {n, kKv, kDim}),
                Tensor::host(v.data(), {n, kKv, kDim}));
  }
  (void)step.finish();
}

inline std::vector<std::int32_t> prompt(std::size_t n, std::int32_t seed = 1) {
  std::vector<std::int32_t> ids(n);
  for (std::size_t i = 0; i < n; ++i)
    ids[i] = static_cast<std::int32_t>((seed * 1000 + i * 37) % 49152);
  return ids;
}

}  // namespace kvcache::testing
