// EvictionPolicy: decides what leaves the cache. It only returns a plan; the Cache applies it and
// reports every preempted sequence and dropped position to the caller.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kvcache/types.hpp"

namespace kvcache {

struct SequenceState {
  SeqId id = 0;
  std::uint64_t tokens = 0;    // tokens held now
  std::uint64_t pages = 0;     // pages referenced, shared ones included
  std::int32_t priority = 50;  // 0..100, higher is kept longer
  std::uint64_t created_step = 0;
  std::uint64_t last_used_step = 0;
  Position next_position = 0;  // logical position the next token will get
};

// Per-token detail of one sequence: ascending logical positions and, when the policy asked for
// them, accumulated attention scores (empty otherwise).
struct TokenDetail {
  std::span<const Position> positions;
  std::span<const float> scores;
};

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual TokenDetail tokens(SeqId sequence) const = 0;
};

struct CacheState {
  std::uint32_t page_size = 0;
  std::uint64_t step = 0;
  std::uint64_t total_pages = 0;
  std::uint64_t free_pages = 0;
  std::uint64_t cached_pages = 0;  // unreferenced prefix-cache pages, reclaimable
  std::span<const SequenceState> sequences;
  const TokenSource* tokens = nullptr;
};

struct DroppedRange {
  SeqId sequence = 0;
  PositionRange range;
  friend bool operator==(const DroppedRange&, const DroppedRange&) = default;
};

struct EvictionPlan {
  std::uint64_t free_cached_pages = 0;
  std::vector<SeqId> preempt;
  std::vector<DroppedRange> drop;
  bool empty() const { return free_cached_pages == 0 && preempt.empty() && drop.empty(); }
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  // Whether attention should accumulate per-token scores for this policy (H2O).
  virtual bool wants_scores() const = 0;
  // Whether its plans may drop token ranges (StreamingLLM, H2O), not only preempt sequences or
  // free cached pages; nullopt: not declared (a warning where the storage formats may not allow
  // it: kivi-k's scales span groups of tokens).
  virtual std::optional<bool> drops_tokens() const { return std::nullopt; }
  // Proactive, after each step: StreamingLLM windows, H2O budgets.
  virtual EvictionPlan after_step(const CacheState& state) = 0;
  // A reserve needs `pages_needed` more free pages than there are.
  virtual EvictionPlan on_pressure(const CacheState& state, std::uint64_t pages_needed) = 0;
};

}  // namespace kvcache
