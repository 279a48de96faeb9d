// AttentionMask: which key positions a query position may see, as a few half-open ranges.
// Kernels iterate ranges, so a sliding window costs O(window) and no dense mask ever exists.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kvcache/types.hpp"

namespace kvcache {

// Known kinds are described declaratively so kernels can specialize; any other mask still works
// everywhere through visible().
enum class MaskKind : std::uint32_t {
  custom = 0,
  causal = 1,
  sliding_window = 2,  // the last `window` positions, the query's own included
  sink_window = 3,     // the first `sinks` positions plus the last `window`
  chunked = 4,         // causal within blocks of `chunk` positions
};

struct MaskDescription {
  MaskKind kind = MaskKind::custom;
  std::uint32_t max_ranges = 1;  // most ranges visible() returns for one query
  std::int64_t window = 0;
  std::int64_t sinks = 0;
  std::int64_t chunk = 0;
  // query_positions() places queries elsewhere than at their own positions for some ranges.
  bool positions_in_cache = false;
};

class AttentionMask {
 public:
  virtual ~AttentionMask() = default;
  virtual MaskDescription describe() const = 0;
  // For each query position q = queries[i]: at most max_ranges ascending, disjoint, non-empty
  // ranges of key positions q may see, written at ranges[i * max_ranges], their number at
  // counts[i]. Sizes: ranges = queries.size() * max_ranges, counts = queries.size().
  virtual void visible(std::span<const Position> queries, std::span<PositionRange> ranges,
                       std::span<std::uint32_t> counts) const = 0;
  // Where each query stands against each of the ranges visible() answered, at
  // positions[i * max_ranges + k] for its range k: its own position, or, for a RoPE model
  // streaming past its context (StreamingLLM), its position within the cache, which keeps the
  // distance to the sinks within what the model was trained on. Asked only of a mask that
  // describes positions_in_cache; the attention turns the query by the difference.
  virtual void query_positions(std::span<const Position> queries,
                               [[maybe_unused]] std::span<const PositionRange> ranges,
                               std::span<const std::uint32_t> counts,
                               std::span<Position> positions) const {
    const std::size_t max_ranges = describe().max_ranges;
    for (std::size_t i = 0; i < queries.size(); ++i)
      for (std::uint32_t k = 0; k < counts[i]; ++k) positions[i * max_ranges + k] = queries[i];
  }
};

}  // namespace kvcache
