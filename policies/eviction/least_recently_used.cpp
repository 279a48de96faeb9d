#include "policies.hpp"

namespace kvcache::eviction {

LeastRecentlyUsed::LeastRecentlyUsed(const sdk::Options& options) {
  options.only({});
}

EvictionPlan LeastRecentlyUsed::on_pressure(const CacheState& state, std::uint64_t pages_needed) {
  return preempt_by(state, pages_needed, [](const SequenceState& a, const SequenceState& b) {
    return a.last_used_step < b.last_used_step;
  });
}

}  // namespace kvcache::eviction
