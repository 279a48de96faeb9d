#include <cmath>

#include "kvcache/rope.hpp"

namespace kvcache {

RotationTable rotation_table(const Rope& rope, std::span<const double> frequencies,
                             std::span<const Position> queries,
                             std::span<const std::uint32_t> counts, std::uint32_t max_ranges,
                             std::span<const Position> positions) {
  RotationTable t;
  const std::size_t half = frequencies.size();
  std::vector<std::uint32_t> rotation(queries.size() * max_ranges, 0);
  for (std::size_t i = 0; i < queries.size(); ++i)
    for (std::uint32_t k = 0; k < counts[i]; ++k) {
      const Position shift = positions[i * max_ranges + k] - queries[i];
      if (shift == 0) continue;
      // In double: the angle of a long stream's shift is tens of thousands of radians.
      for (const bool sine : {false, true})
        for (std::size_t j = 0; j < half; ++j) {
          const double angle = static_cast<double>(shift) * frequencies[j];
          t.cos_sin.push_back(static_cast<float>(sine ? std::sin(angle) : std::cos(angle)));
        }
      rotation[i * max_ranges + k] = static_cast<std::uint32_t>(t.cos_sin.size() / (2 * half));
    }
  if (t.cos_sin.empty()) return t;  // every query stands at its own position: nothing to turn
  t.style = rope.style;
  t.rotary_dims = static_cast<std::uint32_t>(2 * half);
  t.range_rotation = std::move(rotation);
  return t;
}

}  // namespace kvcache
