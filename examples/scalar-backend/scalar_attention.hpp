// Attention of plain loops: for each query and query head, the softmax over its visible keys'
// logits (in double), and the weighted sum of their values, each row decoded by the format.
// Decode and prefill differ only in how many queries a sequence has; the paging library's plan
// checks the request and turns the mask's position ranges into ranges of slots, once a step.
#pragma once

#include "kvcache/attention.hpp"

namespace scalar {

class ScalarAttention final : public kvcache::Attention {
 public:
  std::unique_ptr<kvcache::StepPlan> plan(kvcache::CacheStore& store,
                                          const kvcache::StepRequest& request) override;
  void run(kvcache::CacheStore& store, const kvcache::StepPlan& plan, std::uint32_t layer,
           const DLTensor& q, DLTensor& out) override;
};

}  // namespace scalar
