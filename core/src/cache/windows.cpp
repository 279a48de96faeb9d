#include "cache/windows.hpp"

#include <algorithm>

namespace kvcache::windows {
namespace {

std::uint64_t pages_for(std::uint64_t tokens, std::uint32_t page_size) {
  return (tokens + page_size - 1) / page_size;
}

// The ranges a query at `at` sees.
std::vector<PositionRange> seen_by(const AttentionMask& mask, Position at) {
  const std::uint32_t max_ranges = mask.describe().max_ranges;
  std::vector<PositionRange> ranges(max_ranges);
  std::uint32_t count = 0;
  mask.visible(std::span<const Position>(&at, 1), ranges, std::span<std::uint32_t>(&count, 1));
  ranges.resize(count);
  return ranges;
}

}  // namespace

bool frees(const MaskDescription& mask) {
  switch (mask.kind) {
    case MaskKind::sliding_window:
    case MaskKind::sink_window:
      return mask.window > 0;
    case MaskKind::chunked:
      return mask.chunk > 0;
    default:
      return false;
  }
}

std::uint64_t pages_kept(const MaskDescription& mask, std::uint64_t context,
                         std::uint32_t page_size, std::uint32_t rollback) {
  const std::uint64_t all = pages_for(context, page_size);
  if (!frees(mask)) return all;
  const auto window =
      static_cast<std::uint64_t>(mask.kind == MaskKind::chunked ? mask.chunk : mask.window);
  std::uint64_t kept = pages_for(window + rollback, page_size) + 1;
  if (mask.kind == MaskKind::sink_window)
    kept += pages_for(static_cast<std::uint64_t>(std::max<std::int64_t>(mask.sinks, 0)), page_size);
  return std::min(all, kept);
}

std::vector<PositionRange> behind(const AttentionMask& mask, std::span<const Position> held,
                                  Position next, std::uint32_t page_size) {
  const std::vector<PositionRange> seen = seen_by(mask, next);
  const auto kept = [&](Position p) {
    return p >= next || std::any_of(seen.begin(), seen.end(), [&](const PositionRange& r) {
             return p >= r.begin && p < r.end;
           });
  };
  std::vector<Position> gone;
  for (std::size_t begin = 0; begin < held.size(); begin += page_size) {
    const auto page = held.subspan(begin, std::min<std::size_t>(page_size, held.size() - begin));
    if (std::none_of(page.begin(), page.end(), kept))
      gone.insert(gone.end(), page.begin(), page.end());
  }
  return ranges_of(gone);
}

std::vector<std::uint64_t> pages_seen(const AttentionMask& mask, Position next,
                                      std::uint32_t page_size) {
  std::vector<std::uint64_t> pages;
  for (PositionRange r : seen_by(mask, next)) {
    r.begin = std::max<Position>(r.begin, 0);
    r.end = std::min(r.end, next);
    if (r.begin >= r.end) continue;
    for (auto page = static_cast<std::uint64_t>(r.begin) / page_size;
         page <= static_cast<std::uint64_t>(r.end - 1) / page_size; ++page)
      pages.push_back(page);
  }
  std::sort(pages.begin(), pages.end());
  pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
  return pages;
}

std::optional<PositionRange> missing(const AttentionMask& mask, std::span<const Position> held,
                                     Position next) {
  for (PositionRange r : seen_by(mask, next)) {
    r.end = std::min(r.end, next);
    for (Position p = r.begin; p < r.end; ++p) {
      if (std::binary_search(held.begin(), held.end(), p)) continue;
      Position end = p + 1;
      while (end < r.end && !std::binary_search(held.begin(), held.end(), end)) ++end;
      return PositionRange{p, end};
    }
  }
  return std::nullopt;
}

}  // namespace kvcache::windows
