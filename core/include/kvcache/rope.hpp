// RoPE, as far as the cache needs it. A RoPE model stores keys rotated at their positions; the
// cache never rotates a stored key. When a mask places a query elsewhere than at its own position
// for some of its ranges (StreamingLLM's positions within the cache), the attention turns the
// query instead: rotations compose, R(a)·R(b) = R(a + b), so q turned by the difference scores
// against the stored keys exactly as the re-rotated keys would (query_rotation.hpp).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvcache/export.hpp"
#include "kvcache/host_only.hpp"
#include "kvcache/query_rotation.hpp"
#include "kvcache/rope_style.hpp"
#include "kvcache/types.hpp"

namespace kvcache {

// Longer contexts from the trained frequencies: each pair's frequency scaled.
struct RopeScaling {
  enum class Kind : std::uint32_t { none, linear, llama3 };
  Kind kind = Kind::none;
  double factor = 1.0;            // linear and llama3: frequencies / factor (llama3: the low ones)
  double low_freq_factor = 1.0;   // llama3: wavelengths above original_context / this are scaled
  double high_freq_factor = 4.0;  // llama3: wavelengths below original_context / this are not
  double original_context = 8192.0;
  friend bool operator==(const RopeScaling&, const RopeScaling&) = default;
};

struct Rope {
  double theta = 10000.0;
  std::uint32_t dims = 0;  // the rotated elements of a head, from its first; 0: all of them
  RopeStyle style = RopeStyle::neox;
  RopeScaling scaling;
  friend bool operator==(const Rope&, const Rope&) = default;

  std::uint32_t rotary_dims(std::uint32_t head_dim) const { return dims == 0 ? head_dim : dims; }
};

KVCACHE_API std::string to_string(RopeStyle style);
KVCACHE_API std::string to_string(RopeScaling::Kind kind);

// The angle each of the rotary_dims / 2 pairs turns by per position, scaling applied (Hugging
// Face's rope_init_fn of the same kind gives the same frequencies).
KVCACHE_API std::vector<double> rope_frequencies(const Rope& rope, std::uint32_t head_dim);

// Turns the pairs of `row` (a head's elements) by `positions` positions (negative: back), in
// double precision.
KVCACHE_API void rope_rotate(const Rope& rope, std::span<const double> frequencies,
                             double positions, std::span<float> row);

// The rotations a host makes (and owns) for a step: for each query i and its range k, where the
// mask placed the query (positions[i * max_ranges + k]) minus where it is (queries[i]); a range
// where the two agree takes none. No rotation at all when every query stands at its own position.
struct RotationTable {
  RopeStyle style = RopeStyle::neox;
  std::uint32_t rotary_dims = 0;
  std::vector<float> cos_sin;
  std::vector<std::uint32_t> range_rotation;
  QueryRotations view() const { return {style, rotary_dims, cos_sin, range_rotation}; }
};
KVCACHE_API RotationTable rotation_table(const Rope& rope, std::span<const double> frequencies,
                                         std::span<const Position> queries,
                                         std::span<const std::uint32_t> counts,
                                         std::uint32_t max_ranges,
                                         std::span<const Position> positions);

}  // namespace kvcache
