// The eviction policies. Each returns a plan; the Cache applies it and reports every preempted
// sequence and every dropped position to the engine.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kvcache/eviction.hpp"
#include "kvcache/sdk/options.hpp"

namespace kvcache::eviction {

// Preempts sequences, those that `before` orders first first, until their pages cover
// `pages_needed` (shared pages count for each holder: the Cache asks again if a reserve still
// does not fit).
template <class Before>
EvictionPlan preempt_by(const CacheState& state, std::uint64_t pages_needed, Before before) {
  std::vector<const SequenceState*> order;
  for (const SequenceState& s : state.sequences) order.push_back(&s);
  std::stable_sort(order.begin(), order.end(),
                   [&](const SequenceState* a, const SequenceState* b) { return before(*a, *b); });
  EvictionPlan plan;
  std::uint64_t pages = 0;
  for (const SequenceState* s : order) {
    if (pages >= pages_needed) break;
    plan.preempt.push_back(s->id);
    pages += s->pages;
  }
  return plan;
}

// The seed's order: the oldest sequence first.
inline EvictionPlan preempt_oldest(const CacheState& state, std::uint64_t pages_needed) {
  return preempt_by(state, pages_needed, [](const SequenceState& a, const SequenceState& b) {
    return a.created_step < b.created_step;
  });
}

// The seed's policy: under pressure, preempt the oldest sequences first.
class OldestFirst final : public EvictionPolicy {
 public:
  explicit OldestFirst(const sdk::Options& options);
  bool wants_scores() const override { return false; }
  std::optional<bool> drops_tokens() const override { return false; }
  EvictionPlan after_step(const CacheState&) override { return {}; }
  EvictionPlan on_pressure(const CacheState& state, std::uint64_t pages_needed) override {
    return preempt_oldest(state, pages_needed);
  }
};

// Under pressure, preempt the least recently used sequences first (cached prefix pages are
// already reclaimed least recently used first by the store before a reserve fails).
class LeastRecentlyUsed final : public EvictionPolicy {
 public:
  explicit LeastRecentlyUsed(const sdk::Options& options);
  bool wants_scores() const override { return false; }
  std::optional<bool> drops_tokens() const override { return false; }
  EvictionPlan after_step(const CacheState&) override { return {}; }
  EvictionPlan on_pressure(const CacheState& state, std::uint64_t pages_needed) override;
};

// TensorRT-LLM style: lowest priority (0..100) first, ties least recently used first.
class Priority final : public EvictionPolicy {
 public:
  explicit Priority(const sdk::Options& options);
  bool wants_scores() const override { return false; }
  std::optional<bool> drops_tokens() const override { return false; }
  EvictionPlan after_step(const CacheState&) override { return {}; }
  EvictionPlan on_pressure(const CacheState& state, std::uint64_t pages_needed) override;
};

// StreamingLLM: after each step, drop what no future query can see under sinks + window, a
// page's worth at a time, so memory stays constant during unbounded generation. Under pressure,
// oldest first.
class Streaming final : public EvictionPolicy {
 public:
  explicit Streaming(const sdk::Options& options);
  bool wants_scores() const override { return false; }
  std::optional<bool> drops_tokens() const override { return true; }
  EvictionPlan after_step(const CacheState& state) override;
  EvictionPlan on_pressure(const CacheState& state, std::uint64_t pages_needed) override {
    return preempt_oldest(state, pages_needed);
  }

 private:
  std::int64_t sinks_ = 4;
  std::int64_t window_ = 1024;
};

// H2O: within a token budget keep the sinks, a recent window and the tokens with the highest
// accumulated attention; drop the rest (a page's worth of slack at a time). Under pressure,
// oldest first.
class HeavyHitter final : public EvictionPolicy {
 public:
  explicit HeavyHitter(const sdk::Options& options);
  bool wants_scores() const override { return true; }
  std::optional<bool> drops_tokens() const override { return true; }
  EvictionPlan after_step(const CacheState& state) override;
  EvictionPlan on_pressure(const CacheState& state, std::uint64_t pages_needed) override {
    return preempt_oldest(state, pages_needed);
  }

 private:
  std::int64_t budget_ = 1024;
  std::int64_t sinks_ = 4;
  std::int64_t recent_ = 256;
};

}  // namespace kvcache::eviction
