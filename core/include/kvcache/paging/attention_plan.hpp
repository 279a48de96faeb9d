// What every paged attention does before its kernels run, whatever the device: check a request
// against the store's model, find each query's sequence, and turn the mask's position ranges
// into ranges of slots (positions ascend along a sequence's slots, even after compaction).
#pragma once

#include <cstdint>
#include <vector>

#include "kvcache/attention.hpp"
#include "kvcache/paging/page_book.hpp"

namespace kvcache::paging {

struct SlotSpan {
  std::uint64_t begin = 0, end = 0;  // slots [begin, end)
};

struct AttentionPlan {
  std::uint64_t queries = 0;
  std::vector<std::size_t> query_sequence;  // index into request.sequences, per query
  std::vector<std::uint64_t> written;       // per sequence: written slots of the layer
  // Per query: its visible slots, ascending and non-empty.
  std::vector<std::vector<SlotSpan>> visible;
  std::uint64_t visible_slots(std::uint64_t query) const {
    std::uint64_t n = 0;
    for (const SlotSpan& s : visible[query]) n += s.end - s.begin;
    return n;
  }
};

// Throws Error(invalid_argument) naming what is wrong: decode with query counts or prefill
// without, a prefill with more queries than written slots, visible ranges that do not match the
// queries (or of a query, more than max_ranges, or ranges that overlap or do not ascend), a layer
// out of range, missing q or out, or a q/out shape other than [queries, q_heads, head_dim]
// (row-major; dtype and device are the backend's to check).
AttentionPlan plan_attention(const PageBook& book, const AttentionRequest& request, bool prefill);

}  // namespace kvcache::paging
