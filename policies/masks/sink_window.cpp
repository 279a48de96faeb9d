#include <algorithm>

#include "masks.hpp"

namespace kvcache::masks {

SinkWindow::SinkWindow(const sdk::Options& options) {
  options.only({"sinks", "window"});
  sinks_ = at_least(options, "sinks", 0);
  window_ = at_least(options, "window", 1);
}

MaskDescription SinkWindow::describe() const {
  return {MaskKind::sink_window, 2, window_, sinks_, 0};
}

void SinkWindow::visible(std::span<const Position> queries, std::span<PositionRange> ranges,
                         std::span<std::uint32_t> counts) const {
  for_each_query(queries, ranges, counts, 2, [&](Position q, std::span<PositionRange> out) {
    const Position window_begin = std::max<Position>(0, q - window_ + 1);
    const Position sink_end = std::min<Position>(sinks_, q + 1);
    if (sink_end >= window_begin) {  // sinks touch the window: one range
      out[0] = {0, q + 1};
      return 1u;
    }
    std::uint32_t n = 0;
    if (sink_end > 0) out[n++] = {0, sink_end};
    out[n++] = {window_begin, q + 1};
    return n;
  });
}

}  // namespace kvcache::masks
