#include <algorithm>

#include "masks.hpp"

namespace kvcache::masks {

SlidingWindow::SlidingWindow(const sdk::Options& options) {
  options.only({"window"});
  window_ = at_least(options, "window", 1);
}

MaskDescription SlidingWindow::describe() const {
  return {MaskKind::sliding_window, 1, window_, 0, 0};
}

void SlidingWindow::visible(std::span<const Position> queries, std::span<PositionRange> ranges,
                            std::span<std::uint32_t> counts) const {
  for_each_query(queries, ranges, counts, 1, [&](Position q, std::span<PositionRange> out) {
    out[0] = {std::max<Position>(0, q - window_ + 1), q + 1};
    return 1u;
  });
}

}  // namespace kvcache::masks
