#include <algorithm>

#include "masks.hpp"

namespace kvcache::masks {

SinkWindow::SinkWindow(const sdk::Options& options) {
  options.only({"sinks", "window", "positions"});
  sinks_ = at_least(options, "sinks", 0);
  window_ = at_least(options, "window", 1);
  in_cache_ = options.one_of("positions", "original", {"original", "cache"}) == "cache";
}

MaskDescription SinkWindow::describe() const {
  return {MaskKind::sink_window, 2, window_, sinks_, 0, in_cache_};
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

void SinkWindow::query_positions(std::span<const Position> queries,
                                 std::span<const PositionRange> ranges,
                                 std::span<const std::uint32_t> counts,
                                 std::span<Position> positions) const {
  for (std::size_t i = 0; i < queries.size(); ++i)
    for (std::uint32_t k = 0; k < counts[i]; ++k) {
      // Two ranges: sinks, then the window [window_begin, q]. Within the cache the window
      // follows the sinks, so the query stands at sinks + (q - window_begin) for them.
      const PositionRange window = ranges[i * 2 + counts[i] - 1];
      const bool sinks = in_cache_ && counts[i] == 2 && k == 0;
      positions[i * 2 + k] = sinks ? ranges[i * 2].end + (queries[i] - window.begin) : queries[i];
    }
}

}  // namespace kvcache::masks
