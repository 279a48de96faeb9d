// What a layer group's mask implies for its pages: how many a sequence keeps, which ones no
// later query will read, and whether a rollback still finds the window it needs. Only the kinds
// whose later queries never look further back than earlier ones (sliding, sink and chunked
// windows) free anything; any other mask, a third party's included, keeps every token.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kvcache/mask.hpp"

namespace kvcache::windows {

// Whether a group under this mask frees the pages its window leaves behind.
bool frees(const MaskDescription& mask);

// Pages a sequence of `context` tokens holds at most in a group under this mask, between steps
// of one token: a window's pages and the page it is filling (and the sinks' pages), and those of
// `rollback` tokens kept behind the window.
std::uint64_t pages_kept(const MaskDescription& mask, std::uint64_t context,
                         std::uint32_t page_size, std::uint32_t rollback = 0);

// The positions of whole pages that no query at `next` or later sees, for a sequence whose
// slots hold `held` (ascending) in pages of `page_size`: what the group may drop.
std::vector<PositionRange> behind(const AttentionMask& mask, std::span<const Position> held,
                                  Position next, std::uint32_t page_size);

// The pages (indices: position / page_size) before `next` that hold a position a query at `next`
// sees, ascending: what a sequence that has seen `next` tokens must hold in such a group.
std::vector<std::uint64_t> pages_seen(const AttentionMask& mask, Position next,
                                      std::uint32_t page_size);

// The first positions before `next` that a query at `next` sees and `held` lacks (freed
// already): nullopt when a sequence truncated to `next` can go on.
std::optional<PositionRange> missing(const AttentionMask& mask, std::span<const Position> held,
                                     Position next);

}  // namespace kvcache::windows
