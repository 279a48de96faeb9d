// The Cache's state, shared by the facade (cache.cpp) and its steps (step.cpp).
#pragma once

#include <algorithm>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
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

  // Per-token detail for the policy, read from the store on demand.
  class StoreTokens final : public TokenSource {
   public:
    explicit StoreTokens(const CacheStore& store) : store_(store) {}
    TokenDetail tokens(SeqId id) const override {
      auto& cached = cache_[id];
      if (cached.first.empty()) {
        cached.first = store_.positions(id);
        cached.second = store_.scores(id);
      }
      return {cached.first, cached.second};
    }

   private:
    const CacheStore& store_;
    mutable std::unordered_map<SeqId, std::pair<std::vector<Position>, std::vector<float>>> cache_;
  };

  template <class Decide>
  EvictionReport consult(Decide&& decide) {
    std::vector<SequenceState> states;
    const StoreStats st = store->stats();
    for (const auto& [id, s] : sequences) {
      const std::uint64_t tokens = store->length(id);
      states.push_back({id, tokens, (tokens + page_size - 1) / page_size, s.priority,
                        s.created_step, s.last_used_step, s.next_position});
    }
    const StoreTokens tokens(*store);
    const CacheState state{page_size,       step,   st.total_pages, st.free_pages,
                           st.cached_pages, states, &tokens};
    return apply(decide(state));
  }

  // Carries out a plan and reports exactly what it removed. If a step fails, what was already
  // done is reported through EvictionError, never lost.
  EvictionReport apply(const EvictionPlan& plan) {
    EvictionReport report;
    try {
      if (plan.free_cached_pages > 0)
        report.cached_pages_freed = store->evict_cached(plan.free_cached_pages);
      for (SeqId id : plan.preempt) {
        if (!sequences.contains(id)) continue;
        store->release(id);
        sequences.erase(id);
        report.preempted.push_back(id);
      }
      std::map<SeqId, std::vector<PositionRange>> drops;
      for (const DroppedRange& d : plan.drop)
        if (sequences.contains(d.sequence)) drops[d.sequence].push_back(d.range);
      for (const auto& [id, ranges] : drops) {
        const std::vector<Position> before = store->positions(id);
        store->drop(id, ranges);
        const std::vector<Position> after = store->positions(id);
        std::vector<Position> gone;
        std::set_difference(before.begin(), before.end(), after.begin(), after.end(),
                            std::back_inserter(gone));
        for (const PositionRange& r : ranges_of(gone)) report.dropped.push_back({id, r});
      }
    } catch (const EvictionError&) {
      throw;
    } catch (const Error& e) {
      throw EvictionError(e.code(), std::string("applying the eviction plan: ") + e.what(),
                          std::move(report));
    }
    return report;
  }

  // Pages a reserve of these tokens needs beyond what is free or cached.
  std::uint64_t shortfall(std::span<const SeqId> ids, std::span<const std::uint32_t> tokens) {
    std::uint64_t needed = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const std::uint64_t length = store->length(ids[i]);
      needed += (length + tokens[i] + page_size - 1) / page_size -
                (length + page_size - 1) / page_size + 1;
    }
    const StoreStats st = store->stats();
    const std::uint64_t available = st.free_pages + st.cached_pages;
    return needed > available ? needed - available : 1;
  }

  // What the mask lets each query see: the newest counts[i] tokens of ids[i] (one each when
  // counts is empty). Marks the sequences used in this step.
  struct Visible {
    std::vector<PositionRange> ranges;
    std::vector<std::uint32_t> counts;
    std::uint32_t max_ranges = 1;
    VisibleRanges view() const { return {ranges, counts, max_ranges}; }
  };
  Visible visible_for(std::span<const SeqId> ids, std::span<const std::uint32_t> counts) {
    std::vector<Position> queries;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      SequenceInfo& s = info(ids[i]);
      s.last_used_step = step;
      const std::uint32_t n = counts.empty() ? 1 : counts[i];
      for (std::uint32_t j = 0; j < n; ++j) queries.push_back(s.next_position - n + j);
    }
    Visible v;
    v.max_ranges = mask->describe().max_ranges;
    v.ranges.assign(queries.size() * v.max_ranges, {});
    v.counts.assign(queries.size(), 0);
    mask->visible(queries, v.ranges, v.counts);
    return v;
  }

  // After each model step: the policy's proactive hook.
  EvictionReport after_step() {
    ++step;
    if (!policy) return {};
    return consult([&](const CacheState& s) { return policy->after_step(s); });
  }

  bool wants_scores() const { return policy && policy->wants_scores(); }

  void attend(std::uint32_t layer, std::span<const SeqId> ids,
              std::span<const std::uint32_t> counts, const DLTensor& q, DLTensor& out) {
    const Visible visible = visible_for(ids, counts);
    AttentionRequest request;
    request.layer = layer;
    request.sequences = ids;
    request.query_counts = counts;
    request.q = &q;
    request.out = &out;
    request.visible = visible.view();
    request.accumulate_scores = wants_scores();
    counts.empty() ? attention->decode(*store, request) : attention->prefill(*store, request);
  }

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
