#include <string>

#include "kvcache/attention.hpp"
#include "kvcache/status.hpp"

namespace kvcache {

RequestCopy::RequestCopy(const StepRequest& r)
    : sequences_(r.sequences.begin(), r.sequences.end()),
      query_counts_(r.query_counts.begin(), r.query_counts.end()),
      ranges_(r.visible.ranges.begin(), r.visible.ranges.end()),
      range_counts_(r.visible.counts.begin(), r.visible.counts.end()),
      max_ranges_(r.visible.max_ranges),
      cos_sin_(r.visible.rotations.cos_sin.begin(), r.visible.rotations.cos_sin.end()),
      range_rotation_(r.visible.rotations.range_rotation.begin(),
                      r.visible.rotations.range_rotation.end()),
      rotations_{r.visible.rotations.style, r.visible.rotations.rotary_dims, cos_sin_,
                 range_rotation_},
      scale_(r.scale),
      accumulate_scores_(r.accumulate_scores) {}

AttentionRequest RequestCopy::request(std::uint32_t layer, const DLTensor& q, DLTensor& out) const {
  AttentionRequest r;
  r.layer = layer;
  r.sequences = sequences_;
  r.query_counts = query_counts_;
  r.q = &q;
  r.out = &out;
  r.visible = {ranges_, range_counts_, max_ranges_, rotations_};
  r.scale = scale_;
  r.accumulate_scores = accumulate_scores_;
  return r;
}

std::unique_ptr<StepPlan> Attention::plan(CacheStore&, const StepRequest& request) {
  return std::make_unique<RequestCopy>(request);
}

void Attention::run(CacheStore& store, const StepPlan& plan, std::uint32_t layer, const DLTensor& q,
                    DLTensor& out) {
  const auto* copy = dynamic_cast<const RequestCopy*>(&plan);
  if (copy == nullptr)
    throw Error(Code::invalid_argument, "run: the plan was not made by this attention's plan()");
  const AttentionRequest request = copy->request(layer, q, out);
  copy->prefill() ? prefill(store, request) : decode(store, request);
}

}  // namespace kvcache
