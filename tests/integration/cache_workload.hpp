// A model-shaped workload driven through the Cache facade: prefill, then decode steps of
// begin_step -> append and attention on every layer -> finish, with every eviction
// report collected and applied to a shadow of what each sequence should still hold. A step that
// fails is dropped (undone) and its error rethrown, after noting what it evicted.
#pragma once

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "kvcache/cache.hpp"

namespace kvcache::testing {

class Workload {
 public:
  explicit Workload(Cache& cache, unsigned seed = 1) : cache_(cache), rng_(seed) {}

  SeqId add(std::int32_t priority = 50) {
    const SeqId id = cache_.add_sequence(priority);
    shadow_[id];
    return id;
  }

  // One step of `count` new tokens for each sequence: their K/V appended on every layer and
  // attention over them (prefill when count > 1). Sequences preempted by the step's reserve leave
  // it (Step::sequences()).
  void step(std::vector<SeqId> ids, std::uint32_t count) {
    try {
      run_step(ids, count);
    } catch (const EvictionError& e) {  // what begin_step or finish evicted before failing
      note(e.report());
      throw;
    }
  }

  // Every live sequence holds exactly what the shadow says: nothing left unreported.
  void check_nothing_lost() const {
    for (const auto& [id, positions] : shadow_) {
      const std::vector<Position> held = cache_.store().positions(id);
      ASSERT_EQ(std::vector<Position>(positions.begin(), positions.end()), held)
          << "sequence " << id;
    }
    EXPECT_EQ(cache_.sequences().size(), shadow_.size());
  }

  const EvictionReport& total() const { return total_; }
  std::vector<SeqId> live() const {
    std::vector<SeqId> ids;
    for (const auto& [id, p] : shadow_) ids.push_back(id);
    return ids;
  }
  const std::set<Position>& held(SeqId id) const { return shadow_.at(id); }

 private:
  void run_step(const std::vector<SeqId>& ids, std::uint32_t count) {
    const std::vector<std::uint32_t> counts(ids.size(), count);
    Step s = cache_.begin_step(ids, counts);
    const ModelShape& m = cache_.model();
    const std::vector<SeqId> members(s.sequences().begin(), s.sequences().end());
    // The step's tokens, held once it finishes (even if the policy's hook then fails).
    const auto commit = [&] {
      for (SeqId id : members)
        for (std::uint32_t t = 0; t < count; ++t) shadow_[id].insert(next_[id]++);
    };
    const auto rows = static_cast<std::int64_t>(s.tokens());
    std::vector<float> k(rows * m.kv_heads * m.head_dim), v(k.size());
    std::vector<float> q(rows * m.q_heads * m.head_dim), out(q.size());
    try {
      for (std::uint32_t layer = 0; rows > 0 && layer < m.layers; ++layer) {
        for (float& x : k) x = normal_(rng_);
        for (float& x : v) x = normal_(rng_);
        for (float& x : q) x = normal_(rng_);
        s.append(layer, Tensor::host(k.data(), {rows, m.kv_heads, m.head_dim}),
                 Tensor::host(v.data(), {rows, m.kv_heads, m.head_dim}));
        Tensor o = Tensor::host(out.data(), {rows, m.q_heads, m.head_dim});
        const Tensor qt = Tensor::host(q.data(), {rows, m.q_heads, m.head_dim});
        count == 1 ? s.decode(layer, qt, o) : s.prefill(layer, qt, o);
        for (float x : out) ASSERT_TRUE(std::isfinite(x));
      }
    } catch (...) {  // the step is dropped, so undone; what begin_step evicted stays gone
      note(s.report());
      throw;
    }
    EvictionReport report;
    try {
      report = s.finish();  // begin_step's evictions and the policy's hook
    } catch (const EvictionError&) {
      commit();
      throw;
    }
    commit();
    note(report);
  }
  void note(const EvictionReport& r) {
    for (SeqId id : r.preempted) {
      ASSERT_TRUE(shadow_.contains(id)) << "preempted twice or unknown: " << id;
      shadow_.erase(id);
    }
    for (const DroppedRange& d : r.dropped)
      for (Position p = d.range.begin; p < d.range.end; ++p)
        ASSERT_EQ(shadow_.at(d.sequence).erase(p), 1u) << "reported a position not held: " << p;
    total_.merge(r);
  }

  Cache& cache_;
  std::mt19937 rng_;
  std::normal_distribution<float> normal_;
  std::map<SeqId, std::set<Position>> shadow_;
  std::map<SeqId, Position> next_;
  EvictionReport total_;
};

}  // namespace kvcache::testing
