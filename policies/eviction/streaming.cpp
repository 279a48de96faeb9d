#include <algorithm>

#include "policies.hpp"

namespace kvcache::eviction {

Streaming::Streaming(const sdk::Options& options) {
  options.only({"sinks", "window"});
  sinks_ = options.get<std::int64_t>("sinks", 4);
  window_ = options.get<std::int64_t>("window", 1024);
  if (sinks_ < 0 || window_ < 1 || sinks_ > (std::int64_t{1} << 40) ||
      window_ > (std::int64_t{1} << 40))
    throw Error(Code::invalid_argument,
                "streaming: sinks must be in [0, 2^40] and window in [1, 2^40]");
}

EvictionPlan Streaming::after_step(const CacheState& state) {
  if (state.tokens == nullptr)
    throw Error(Code::invalid_argument, "streaming needs per-token detail");
  EvictionPlan plan;
  for (const SequenceState& s : state.sequences) {
    // The next query, at next_position, sees [0, sinks) and [next_position - window + 1, ...).
    const Position first_kept = s.next_position - window_ + 1;
    if (first_kept <= sinks_) continue;
    const TokenDetail tokens = state.tokens->tokens(s.id);
    const auto begin = std::lower_bound(tokens.positions.begin(), tokens.positions.end(), sinks_);
    const auto end = std::lower_bound(tokens.positions.begin(), tokens.positions.end(), first_kept);
    // A page's worth at a time: compaction moves the window once per page, not per token.
    if (end - begin >= static_cast<std::ptrdiff_t>(state.page_size))
      plan.drop.push_back({s.id, {sinks_, first_kept}});
  }
  return plan;
}

}  // namespace kvcache::eviction
