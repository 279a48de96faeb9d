#include "attention/query_tiles.hpp"

#include <algorithm>
#include <bit>

namespace kvcache::cpu {
namespace {

using Spans = std::vector<paging::SlotSpan>;

// The slots in both a and b (each ascending and disjoint) that neither turns the query for: a
// turned query is its own, so slots it sees turned are never shared.
Spans intersect(const Spans& a, const Spans& b) {
  Spans out;
  for (std::size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    const std::uint64_t begin = std::max(a[i].begin, b[j].begin);
    const std::uint64_t end = std::min(a[i].end, b[j].end);
    if (begin < end && a[i].rotation == 0 && b[j].rotation == 0) out.push_back({begin, end});
    (a[i].end < b[j].end ? i : j)++;
  }
  return out;
}

// The slots of a not in b (b within a, both ascending and disjoint).
Spans subtract(const Spans& a, const Spans& b) {
  Spans out;
  std::size_t j = 0;
  for (const paging::SlotSpan& s : a) {
    std::uint64_t at = s.begin;
    for (; j < b.size() && b[j].begin < s.end; ++j) {
      if (b[j].begin > at) out.push_back({at, b[j].begin, s.rotation});
      at = std::max(at, b[j].end);
    }
    if (at < s.end) out.push_back({at, s.end, s.rotation});
  }
  return out;
}

}  // namespace

QueryTiles tile_queries(const paging::AttentionPlan& plan, std::uint32_t max_width) {
  QueryTiles out;
  out.own = plan.visible;
  for (std::size_t i = 0; i < plan.queries;) {
    std::size_t run = 1;
    while (i + run < plan.queries && plan.query_sequence[i + run] == plan.query_sequence[i] &&
           run < max_width)
      ++run;
    const auto width = std::bit_floor(static_cast<std::uint32_t>(run));
    if (width > 1) {
      QueryTile tile{i, width, plan.visible[i]};
      for (std::size_t q = i + 1; q < i + width; ++q)
        tile.shared = intersect(tile.shared, plan.visible[q]);
      for (std::size_t q = i; q < i + width; ++q)
        out.own[q] = subtract(plan.visible[q], tile.shared);
      out.tiles.push_back(std::move(tile));
    }
    i += width;
  }
  return out;
}

}  // namespace kvcache::cpu
