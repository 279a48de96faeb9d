#include "kvcache/paging/attention_plan.hpp"

#include <span>
#include <string>

#include "kvcache/sdk/row_tensor.hpp"
#include "kvcache/status.hpp"

namespace kvcache::paging {
namespace {

void check_shape(const DLTensor* t, const char* name, std::uint64_t queries, const ModelShape& m) {
  if (t == nullptr) throw Error(Code::invalid_argument, std::string(name) + " is required");
  (void)read_rows(*t, {queries, m.q_heads, m.head_dim}, name);
}

// The first of the `written` slots of `s` whose position is at least `target`.
std::uint64_t lower_slot(const PageBook& book, const PageBook::Sequence& s, std::uint64_t written,
                         Position target) {
  const std::uint32_t p = book.page_size();
  std::uint64_t lo = 0, hi = written;
  while (lo < hi) {
    const std::uint64_t mid = (lo + hi) / 2;
    (book.positions_of(s.pages[mid / p])[mid % p] < target ? lo = mid + 1 : hi = mid);
  }
  return lo;
}

}  // namespace

// The slot spans of every query, over each sequence's reserved slots.
AttentionPlan plan_step(const PageBook& book, const StepRequest& request) {
  const std::span<const SeqId> sequences = request.sequences;
  const std::span<const std::uint32_t> query_counts = request.query_counts;
  const VisibleRanges& v = request.visible;
  const bool prefill = !query_counts.empty();
  if (prefill && query_counts.size() != sequences.size())
    throw Error(Code::invalid_argument, "one query count per sequence");
  AttentionPlan plan;
  plan.sequences.assign(sequences.begin(), sequences.end());
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const PageBook::Sequence& s = book.find(sequences[i]);
    plan.shapes.push_back(s.shape);
    plan.written.push_back(s.length);
    const std::uint32_t n = prefill ? query_counts[i] : 1;
    if (n > plan.written.back())
      throw Error(Code::invalid_argument, "sequence " + std::to_string(sequences[i]) +
                                              " has only " + std::to_string(plan.written.back()) +
                                              " reserved slots for " + std::to_string(n) +
                                              (n == 1 ? " query" : " queries"));
    plan.query_sequence.insert(plan.query_sequence.end(), n, i);
  }
  plan.queries = plan.query_sequence.size();
  if (v.max_ranges == 0 || v.counts.size() != plan.queries ||
      v.ranges.size() < plan.queries * v.max_ranges)
    throw Error(Code::invalid_argument,
                "visible ranges: one entry of max_ranges ranges per query (" +
                    std::to_string(plan.queries) + " queries)");
  const QueryRotations& turn = v.rotations;
  if (!turn.empty()) {
    if (turn.range_rotation.size() != v.ranges.size() || turn.rotary_dims == 0 ||
        turn.rotary_dims % 2 != 0 || turn.rotary_dims > book.spec().model.head_dim ||
        turn.cos_sin.size() % turn.rotary_dims != 0)
      throw Error(Code::invalid_argument,
                  "query rotations: one per range, of an even rotary_dims up to head_dim");
    plan.rotation_style = turn.style;
    plan.rotary_dims = turn.rotary_dims;
    plan.cos_sin.assign(turn.cos_sin.begin(), turn.cos_sin.end());
  }
  plan.visible.resize(plan.queries);
  for (std::uint64_t i = 0; i < plan.queries; ++i) {
    const std::size_t seq = plan.query_sequence[i];
    const PageBook::Sequence& s = book.find(sequences[seq]);
    if (v.counts[i] > v.max_ranges)
      throw Error(Code::invalid_argument, "visible ranges of query " + std::to_string(i) + ": " +
                                              std::to_string(v.counts[i]) +
                                              " ranges, more than max_ranges (" +
                                              std::to_string(v.max_ranges) + ")");
    for (std::uint32_t k = 0; k < v.counts[i]; ++k) {
      const PositionRange range = v.ranges[i * v.max_ranges + k];
      // Kernels walk the slots once in order: ranges that overlap or go back would count keys
      // twice.
      const PositionRange* before = k > 0 ? &v.ranges[i * v.max_ranges + k - 1] : nullptr;
      if (range.end < range.begin || (before != nullptr && range.begin < before->end))
        throw Error(Code::invalid_argument,
                    "visible ranges of query " + std::to_string(i) + ": [" +
                        std::to_string(range.begin) + ", " + std::to_string(range.end) + ")" +
                        (range.end < range.begin
                             ? " ends before it begins"
                             : " overlaps or precedes [" + std::to_string(before->begin) + ", " +
                                   std::to_string(before->end) + ")") +
                        "; they must ascend and be disjoint");
      const std::uint32_t rotation = turn.empty() ? 0 : turn.range_rotation[i * v.max_ranges + k];
      if (rotation > turn.count())
        throw Error(Code::invalid_argument, "visible ranges of query " + std::to_string(i) +
                                                ": rotation " + std::to_string(rotation) + " of " +
                                                std::to_string(turn.count()));
      const SlotSpan span{lower_slot(book, s, plan.written[seq], range.begin),
                          lower_slot(book, s, plan.written[seq], range.end), rotation};
      if (span.end > span.begin) plan.visible[i].push_back(span);
    }
  }
  return plan;
}

void check_step_layer(const PageBook& book, const AttentionPlan& plan, std::uint32_t layer,
                      const DLTensor& q, const DLTensor& out) {
  book.check_layer(layer);
  for (std::size_t i = 0; i < plan.sequences.size(); ++i) {  // one lookup a sequence
    const SeqId id = plan.sequences[i];
    const PageBook::Sequence* s = book.find_if(id);
    if (s == nullptr || s->shape != plan.shapes[i])
      throw Error(Code::invalid_argument,
                  "the step's plan is stale: sequence " + std::to_string(id) +
                      " changed shape since it was made (reserve, drop, release or prefix "
                      "match); plan the step again");
    if (s->written[layer] != plan.written[i])
      throw Error(Code::invalid_argument,
                  "layer " + std::to_string(layer) + " of sequence " + std::to_string(id) +
                      " has " + std::to_string(s->written[layer]) +
                      " written slots, the step planned for " + std::to_string(plan.written[i]) +
                      ": append the layer before its attention");
  }
  const ModelShape& m = book.spec().model;
  check_shape(&q, "q", plan.queries, m);
  check_shape(&out, "out", plan.queries, m);
}

}  // namespace kvcache::paging
