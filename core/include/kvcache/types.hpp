// Small value types shared by every interface.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace kvcache {

using SeqId = std::uint64_t;
// Logical position of a token in its sequence. It survives compaction, so masks and eviction
// keep working after tokens were dropped.
using Position = std::int64_t;

// Half-open range [begin, end) of positions.
struct PositionRange {
  Position begin = 0;
  Position end = 0;
  Position size() const { return end - begin; }
  bool empty() const { return end <= begin; }
  friend bool operator==(const PositionRange&, const PositionRange&) = default;
};

// The attention shape of a model: what the cache must hold per token.
struct ModelShape {
  std::uint32_t layers = 0;
  std::uint32_t q_heads = 0;
  std::uint32_t kv_heads = 0;
  std::uint32_t head_dim = 0;
  friend bool operator==(const ModelShape&, const ModelShape&) = default;
};

// Ranges covering ascending positions, adjacent ones merged: {3, 4, 5, 9} -> [3, 6), [9, 10).
template <class Positions>
std::vector<PositionRange> ranges_of(const Positions& ascending) {
  std::vector<PositionRange> ranges;
  for (const Position p : ascending) {
    if (!ranges.empty() && ranges.back().end == p) {
      ++ranges.back().end;
    } else {
      ranges.push_back({p, p + 1});
    }
  }
  return ranges;
}

enum class ComponentKind : std::uint32_t {
  backend = 1,
  quantizer = 2,
  mask = 3,
  eviction = 4,
  transport = 5
};

// "backend", "quantizer", "mask", "eviction", "transport"; "unknown" otherwise.
std::string_view kind_name(ComponentKind kind) noexcept;

}  // namespace kvcache
