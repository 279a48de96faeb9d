#include "policies.hpp"

namespace kvcache::eviction {

std::vector<PositionRange> ranges_of(const std::vector<Position>& positions) {
  std::vector<PositionRange> ranges;
  for (Position p : positions) {
    if (!ranges.empty() && ranges.back().end == p) {
      ++ranges.back().end;
    } else {
      ranges.push_back({p, p + 1});
    }
  }
  return ranges;
}

}  // namespace kvcache::eviction
