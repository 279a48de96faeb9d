// The Cache's state, shared by the facade (cache.cpp) and its steps (step.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvcache/cache.hpp"

namespace kvcache {

struct SequenceInfo {
  std::int32_t priority = 50;
  std::uint64_t created_step = 0;
  std::uint64_t last_used_step = 0;
  Position next_position = 0;
};

struct Cache::Impl {
  std::shared_ptr<const Registry> registry;
  std::string backend_name;
  ModelShape model;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<CacheStore> store;
  std::unique_ptr<Attention> attention;
  std::unique_ptr<AttentionMask> mask;
  std::unique_ptr<EvictionPolicy> policy;  // null: no eviction
  std::map<SeqId, SequenceInfo> sequences;
  std::uint64_t step = 0;
  std::uint32_t page_size = 0;

  SequenceInfo& info(SeqId id) {
    const auto it = sequences.find(id);
    if (it == sequences.end()) throw Error(Code::not_found, "no sequence " + std::to_string(id));
    return it->second;
  }

  // Asks the policy (`decide(state)` over the current CacheState) and carries out its plan.
  template <class Decide>
  EvictionReport consult(Decide&& decide);
  // Carries out a plan and reports exactly what it removed. If a step fails, what was already
  // done is reported through EvictionError, never lost.
  EvictionReport apply(const EvictionPlan& plan);
  // Pages a reserve of these tokens needs beyond what is free or cached.
  std::uint64_t shortfall(std::span<const SeqId> ids, std::span<const std::uint32_t> tokens);
  // What the mask lets each query see: the newest counts[i] tokens of ids[i] (one each when
  // counts is empty). Marks the sequences used in this step.
  struct Visible {
    std::vector<PositionRange> ranges;
    std::vector<std::uint32_t> counts;
    std::uint32_t max_ranges = 1;
    VisibleRanges view() const { return {ranges, counts, max_ranges}; }
  };
  Visible visible_for(std::span<const SeqId> ids, std::span<const std::uint32_t> counts);
  // After each model step: the policy's proactive hook.
  EvictionReport after_step();
  bool wants_scores() const { return policy && policy->wants_scores(); }

  // One layer's attention through the per-layer calls (planned for this call alone).
  void attend(std::uint32_t layer, std::span<const SeqId> ids,
              std::span<const std::uint32_t> counts, const DLTensor& q, DLTensor& out);
  // Room for counts[i] more tokens in batch[i], evicting per the policy; members of the batch
  // it preempts leave batch and counts. Throws CacheFull when it still does not fit.
  EvictionReport reserve(std::vector<SeqId>& batch, std::vector<std::uint32_t>& counts);

  // While a step is open, calls that would change its sequences' shape are refused.
  bool step_open = false;
  void refuse_during_step(const char* call) const {
    if (step_open)
      throw Error(Code::invalid_argument,
                  std::string(call) + ": a step is open; finish it (or drop it) first");
  }
};

}  // namespace kvcache
