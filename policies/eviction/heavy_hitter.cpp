#include <algorithm>
#include <numeric>

#include "policies.hpp"

namespace kvcache::eviction {

HeavyHitter::HeavyHitter(const sdk::Options& options) {
  options.only({"budget", "sinks", "recent"});
  budget_ = options.get<std::int64_t>("budget", 1024);
  sinks_ = options.get<std::int64_t>("sinks", 4);
  recent_ = options.get<std::int64_t>("recent", 256);
  constexpr std::int64_t kMost = std::int64_t{1} << 40;  // keeps budget arithmetic exact
  if (sinks_ < 0 || recent_ < 0 || sinks_ > kMost || recent_ > kMost || budget_ > kMost ||
      budget_ < sinks_ + recent_ + 1)
    throw Error(Code::invalid_argument,
                "heavy-hitter: budget must exceed sinks + recent, all below 2^40 (got budget " +
                    std::to_string(budget_) + ", sinks " + std::to_string(sinks_) + ", recent " +
                    std::to_string(recent_) + ")");
}

EvictionPlan HeavyHitter::after_step(const CacheState& state) {
  if (state.tokens == nullptr)
    throw Error(Code::invalid_argument, "heavy-hitter needs per-token detail");
  EvictionPlan plan;
  for (const SequenceState& s : state.sequences) {
    // Act with a page's worth of slack, so compaction runs once per page of growth.
    if (static_cast<std::int64_t>(s.tokens) < budget_ + static_cast<std::int64_t>(state.page_size))
      continue;
    const TokenDetail t = state.tokens->tokens(s.id);
    if (t.scores.size() != t.positions.size())
      throw Error(Code::invalid_argument, "heavy-hitter needs accumulated attention scores");
    const std::size_t n = t.positions.size();
    // Candidates: neither a sink nor among the `recent` newest tokens.
    const std::size_t first = static_cast<std::size_t>(
        std::lower_bound(t.positions.begin(), t.positions.end(), sinks_) - t.positions.begin());
    const std::size_t last = n - std::min<std::size_t>(n, static_cast<std::size_t>(recent_));
    if (last <= first) continue;
    const auto keep_heavy = static_cast<std::size_t>(budget_ - sinks_ - recent_);
    std::vector<std::size_t> candidates(last - first);
    std::iota(candidates.begin(), candidates.end(), first);
    if (candidates.size() <= keep_heavy) continue;
    // The heaviest stay; ties keep the newer token.
    std::stable_sort(candidates.begin(), candidates.end(), [&](std::size_t a, std::size_t b) {
      return t.scores[a] > t.scores[b] || (t.scores[a] == t.scores[b] && a > b);
    });
    std::vector<Position> dropped;
    for (std::size_t i = keep_heavy; i < candidates.size(); ++i)
      dropped.push_back(t.positions[candidates[i]]);
    std::sort(dropped.begin(), dropped.end());
    for (const PositionRange& r : ranges_of(dropped)) plan.drop.push_back({s.id, r});
  }
  return plan;
}

}  // namespace kvcache::eviction
