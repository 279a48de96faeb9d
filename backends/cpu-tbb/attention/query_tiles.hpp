// Prefill queries in tiles, so that keys several queries see are read once for all of them:
// consecutive queries of a sequence form a tile whose shared keys (those every query of the
// tile sees) go through the kernels once with all the tile's query heads together, each
// query's other keys (for a causal mask, the few near the diagonal) alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvcache/paging/attention_plan.hpp"

namespace kvcache::cpu {

struct QueryTile {
  std::size_t first = 0;                 // the tile's first query
  std::uint32_t width = 0;               // consecutive queries of one sequence, 2 or more
  std::vector<paging::SlotSpan> shared;  // the slots all of them see unturned, ascending
};

struct QueryTiles {
  std::vector<QueryTile> tiles;
  std::vector<std::vector<paging::SlotSpan>> own;  // per query: its visible slots not in a tile's
};

// Tiles of a power-of-two width up to max_width (as many queries as the run of a sequence leaves,
// rounded down); a query left alone keeps all its slots as its own.
QueryTiles tile_queries(const paging::AttentionPlan& plan, std::uint32_t max_width);

}  // namespace kvcache::cpu
