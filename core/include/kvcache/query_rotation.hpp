// How attention turns a query for some of its visible ranges: RoPE positions within the cache
// (StreamingLLM). A mask may place the query elsewhere than at its own position for a range (the
// sinks see it at its position within the cache, not in the whole stream); the host turns that
// difference into a rotation of the query's RoPE pairs, and a backend applies it to the query
// before the range's keys, which stay as stored (quantized ones included). QueryRotations is
// header-only: backends use it without linking the host's library; the host makes the table of
// a step's rotations (RotationTable, rope.hpp).
#pragma once

#include <cstdint>
#include <span>

#include "kvcache/rope_style.hpp"
#include "kvcache/types.hpp"

namespace kvcache {

struct QueryRotations {
  RopeStyle style = RopeStyle::neox;
  std::uint32_t rotary_dims = 0;  // the first rotary_dims elements of a head turn, in pairs
  // Rotation r: rotary_dims / 2 cosines then as many sines, at cos_sin[r * rotary_dims].
  std::span<const float> cos_sin;
  // Parallel to VisibleRanges::ranges: range k of query i takes rotation
  // range_rotation[i * max_ranges + k] - 1, none where 0. Empty: no rotations at all.
  std::span<const std::uint32_t> range_rotation;

  bool empty() const { return range_rotation.empty(); }
  std::size_t count() const { return rotary_dims == 0 ? 0 : cos_sin.size() / rotary_dims; }

  // Turns row (one head's elements, at least rotary_dims of them) by rotation r, in float.
  void rotate(std::size_t r, float* row) const {
    const std::size_t half = rotary_dims / 2;
    const float* c = cos_sin.data() + r * rotary_dims;
    const float* s = c + half;
    for (std::size_t i = 0; i < half; ++i) {
      const std::size_t a = style == RopeStyle::neox ? i : 2 * i;
      const std::size_t b = style == RopeStyle::neox ? i + half : 2 * i + 1;
      const float x = row[a], y = row[b];
      row[a] = x * c[i] - y * s[i];
      row[b] = y * c[i] + x * s[i];
    }
  }
};

}  // namespace kvcache
