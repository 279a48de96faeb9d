// An eviction policy from outside: least frequently used. It counts the steps that used each
// sequence (after each step, those whose last_used_step moved) and, when a reserve needs pages,
// preempts the sequences used least often first, ties least recently used first, new ones last. A
// sequence read once by a long prompt goes before a chat turned over many times, which LRU would
// drop as soon as it paused. The built-in policies are oldest-first, lru, priority, streaming and
// heavy-hitter.
#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include <kvcache/sdk/plugin.hpp>

namespace {

class LeastFrequentlyUsed final : public kvcache::EvictionPolicy {
 public:
  explicit LeastFrequentlyUsed(const kvcache::sdk::Options& options) { options.only({}); }
  bool wants_scores() const override { return false; }
  std::optional<bool> drops_tokens() const override { return false; }

  kvcache::EvictionPlan after_step(const kvcache::CacheState& state) override {
    std::map<kvcache::SeqId, Use> live;  // released sequences are forgotten
    for (const kvcache::SequenceState& s : state.sequences) {
      const auto seen = uses_.find(s.id);
      if (seen == uses_.end()) {
        live[s.id] = {1, s.last_used_step};
      } else {
        const bool used = seen->second.last_used_step != s.last_used_step;
        live[s.id] = {seen->second.count + (used ? 1 : 0), s.last_used_step};
      }
    }
    uses_ = std::move(live);
    return {};
  }

  kvcache::EvictionPlan on_pressure(const kvcache::CacheState& state,
                                    std::uint64_t pages_needed) override {
    std::vector<const kvcache::SequenceState*> order;
    for (const kvcache::SequenceState& s : state.sequences) order.push_back(&s);
    std::stable_sort(order.begin(), order.end(), [&](const auto* a, const auto* b) {
      const std::uint64_t ua = uses(a->id), ub = uses(b->id);
      return ua != ub ? ua < ub : a->last_used_step < b->last_used_step;
    });
    kvcache::EvictionPlan plan;
    std::uint64_t pages = 0;  // shared pages count for each holder; the Cache asks again if short
    for (const kvcache::SequenceState* s : order) {
      if (pages >= pages_needed) break;
      plan.preempt.push_back(s->id);
      pages += s->pages;
    }
    return plan;
  }

 private:
  std::uint64_t uses(kvcache::SeqId id) const {
    const auto it = uses_.find(id);
    // A sequence no step has finished with yet is the one being reserved for: kept, last.
    return it == uses_.end() ? UINT64_MAX : it->second.count;
  }

  struct Use {
    std::uint64_t count = 0;           // steps that used the sequence
    std::uint64_t last_used_step = 0;  // as last seen
  };
  std::map<kvcache::SeqId, Use> uses_;
};

}  // namespace

KVCACHE_PLUGIN("lfu", "1.0.0", kvcache::sdk::component<LeastFrequentlyUsed>("lfu", "1.0.0"))
