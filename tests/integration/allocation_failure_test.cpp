// Allocation failure inside a call. This binary replaces operator new: while armed, the n-th
// allocation on the test's thread throws std::bad_alloc (allocations of oneTBB's worker threads
// are not counted: a kernel's own failure is the fault-injection test's). For n = 1, 2, ... one
// whole step (begin_step under eviction pressure, append and decode on every layer, finish) runs
// with its n-th allocation failing, until a step runs without reaching it. After each failure:
// the error says out of memory, what was evicted was reported, the step's tokens are all there
// or none, the pages add up, and the next step works with attention equal to the reference.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <new>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cache_checks.hpp"
#include "kvcache/cache.hpp"
#include "kvcache/config.hpp"
#include "kvcache/registry.hpp"

namespace {
thread_local long countdown = 0;  // > 0: armed; the allocation that brings it to 0 fails
thread_local bool fired = false;
}  // namespace

// Every plain form of new and delete is replaced, so that none pairs with another allocator's
// (the aligned forms stay the runtime's, in pairs).
void* operator new(std::size_t size) {
  if (countdown > 0 && --countdown == 0) {
    fired = true;
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) {
  return operator new(size);
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return operator new(size);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, const std::nothrow_t& tag) noexcept {
  return operator new(size, tag);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}

namespace kvcache {
namespace {

// Allocations while a Paused lives are not counted (the test's own bookkeeping).
class Paused {
 public:
  Paused() : saved_(countdown) { countdown = 0; }
  ~Paused() { countdown = saved_; }

 private:
  long saved_;
};

// One step of `count` tokens for each of ids, K/V and queries random; what it evicted goes into
// `evicted`, also when it fails. Returns whether finish() was reached and returned.
bool one_step(Cache& cache, const std::vector<SeqId>& ids, std::uint32_t count,
              EvictionReport& evicted, std::mt19937& rng) {
  const ModelShape m = cache.model();
  std::vector<float> kv, q, out;
  {
    Paused p;
    const std::size_t rows = ids.size() * count;
    kv.resize(rows * m.kv_heads * m.head_dim);
    q.resize(rows * m.q_heads * m.head_dim);
    out.resize(q.size());
    std::normal_distribution<float> normal;
    for (float& x : kv) x = normal(rng);
    for (float& x : q) x = normal(rng);
  }
  const std::vector<std::uint32_t> counts = [&] {
    Paused p;
    return std::vector<std::uint32_t>(ids.size(), count);
  }();
  try {
    Step s = cache.begin_step(ids, counts);
    {
      Paused p;
      evicted.merge(s.report());
    }
    const auto rows = static_cast<std::int64_t>(s.tokens());
    for (std::uint32_t layer = 0; layer < m.layers; ++layer) {
      s.append(layer, Tensor::host(kv.data(), {rows, m.kv_heads, m.head_dim}),
               Tensor::host(kv.data(), {rows, m.kv_heads, m.head_dim}));
      Tensor o = Tensor::host(out.data(), {rows, m.q_heads, m.head_dim});
      count == 1 ? s.decode(layer, Tensor::host(q.data(), {rows, m.q_heads, m.head_dim}), o)
                 : s.prefill(layer, Tensor::host(q.data(), {rows, m.q_heads, m.head_dim}), o);
    }
    const EvictionReport all = s.finish();
    Paused p;
    evicted = all;  // begin_step's report included
    return true;
  } catch (const EvictionError& e) {
    Paused p;
    evicted.merge(e.report());
    throw;
  }
}

TEST(AllocationFailure, AtEveryAllocationOfAStepTheCacheStaysUsable) {
  const auto registry = Registry::load(PluginSettings{});
  long points = 0;
  for (long n = 1;; ++n) {
    SCOPED_TRACE("allocation " + std::to_string(n) + " of the step fails");
    // 1 KiB a token, 12 pages of 8: the three sequences fill 11, so the step's reserve evicts.
    const auto cache =
        Cache::open(parse_config("model: {layers: 2, q_heads: 4, kv_heads: 2, head_dim: 32}\n"
                                 "format: fp32\ncache: {page_size: 8, capacity: 96KiB}\n"
                                 "backend: [cpu-tbb]\neviction: oldest-first\n",
                                 "allocation_failure_test.yaml", {}),
                    registry);
    std::mt19937 rng(3);
    EvictionReport setup;
    const SeqId old = cache->add_sequence();
    one_step(*cache, {old}, 40, setup, rng);
    const std::vector<SeqId> ids{cache->add_sequence(), cache->add_sequence()};
    one_step(*cache, ids, 24, setup, rng);
    ASSERT_TRUE(setup.empty());
    std::map<SeqId, std::vector<Position>> before;
    for (const SeqId id : cache->sequences()) before[id] = cache->store().positions(id);

    EvictionReport evicted;
    bool finished = false;
    fired = false;
    countdown = n;
    try {
      finished = one_step(*cache, ids, 9, evicted, rng);  // needs a page more than is free
    } catch (const Error& e) {
      Paused p;
      EXPECT_EQ(e.code(), Code::out_of_memory) << e.what();
    } catch (const std::bad_alloc&) {
    }
    countdown = 0;
    if (!fired) {
      EXPECT_TRUE(finished);
      EXPECT_EQ(evicted.preempted, std::vector<SeqId>{old}) << "the step without a failure";
      break;
    }
    ++points;
    // What was reported left; the rest holds what it held, or that plus the whole step.
    for (const SeqId id : evicted.preempted) before.erase(id);
    const std::vector<SeqId> live = cache->sequences();
    ASSERT_EQ(live.size(), before.size());
    std::optional<bool> grown;  // whether the step's survivors hold its tokens
    for (const SeqId id : ids) {
      if (!before.contains(id)) continue;
      std::vector<Position> positions = cache->store().positions(id);
      const bool grew = positions.size() == before[id].size() + 9;
      if (grown) {
        EXPECT_EQ(grew, *grown) << "a step is whole for every sequence";
      }
      grown = grew;
      if (grew) positions.resize(before[id].size());
      EXPECT_EQ(positions, before[id]) << "sequence " << id;
    }
    if (finished && grown) {
      EXPECT_TRUE(*grown);
    }
    testing::expect_pages_add_up(*cache);
    // The next step works, and attention over what is held equals the reference.
    EvictionReport next;
    ASSERT_TRUE(one_step(*cache, cache->sequences(), 1, next, rng));
    for (const SeqId id : cache->sequences())
      testing::expect_attention_equals_the_reference(*cache, id, rng);
    if (HasFailure()) return;
  }
  EXPECT_GT(points, 20) << "a step allocates more than this";
  std::printf("the step survived each of its %ld allocations failing\n", points);
}

}  // namespace
}  // namespace kvcache
