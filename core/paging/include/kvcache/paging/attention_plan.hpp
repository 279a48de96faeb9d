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
  std::uint32_t rotation = 0;        // the query's rotation for these slots + 1; 0: none
};

struct AttentionPlan {
  std::uint64_t queries = 0;
  std::vector<SeqId> sequences;
  std::vector<std::size_t> query_sequence;  // index into sequences, per query
  // Per sequence: the slots attended over, its reserved slots, which every layer must have written
  // when it runs.
  std::vector<std::uint64_t> written;
  std::vector<std::uint64_t> shapes;  // per sequence: its Sequence::shape when planned
  // Per query: its visible slots, ascending and non-empty.
  std::vector<std::vector<SlotSpan>> visible;
  // The query rotations the spans name (a copy: a step's plan outlives its request).
  RopeStyle rotation_style = RopeStyle::neox;
  std::uint32_t rotary_dims = 0;
  std::vector<float> cos_sin;
  std::size_t rotation_count() const { return rotary_dims == 0 ? 0 : cos_sin.size() / rotary_dims; }
  // The angles, to turn rows with (which rotation a slot takes is its span's, not in here).
  QueryRotations angles() const { return {rotation_style, rotary_dims, cos_sin, {}}; }
  std::uint64_t visible_slots(std::uint64_t query) const {
    std::uint64_t n = 0;
    for (const SlotSpan& s : visible[query]) n += s.end - s.begin;
    return n;
  }
};

// A step's plan, for every layer, over the reserved slots. Throws Error(invalid_argument) naming
// what is wrong: query counts that are not one per sequence, a sequence with fewer reserved slots
// than queries, visible ranges that do not match the queries (or of a query, more than
// max_ranges, or ranges that overlap or do not ascend) or query rotations that do not fit.
AttentionPlan plan_step(const PageBook& book, const StepRequest& request);
// Before a layer runs on a step's plan: Error(invalid_argument) when one of its sequences changed
// shape or was released since it was planned (other sequences may change freely), a layer out of
// range, a sequence's `layer` with fewer written slots than it planned for (attention before
// append), or q or out missing or not [queries, q_heads, head_dim] row-major (their dtype and
// memory are the backend's to check).
void check_step_layer(const PageBook& book, const AttentionPlan& plan, std::uint32_t layer,
                      const DLTensor& q, const DLTensor& out);

}  // namespace kvcache::paging
