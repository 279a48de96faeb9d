#include <tuple>

#include "policies.hpp"

namespace kvcache::eviction {

Priority::Priority(const sdk::Options& options) {
  options.only({});
}

EvictionPlan Priority::on_pressure(const CacheState& state, std::uint64_t pages_needed) {
  return preempt_by(state, pages_needed, [](const SequenceState& a, const SequenceState& b) {
    return std::tie(a.priority, a.last_used_step) < std::tie(b.priority, b.last_used_step);
  });
}

}  // namespace kvcache::eviction
