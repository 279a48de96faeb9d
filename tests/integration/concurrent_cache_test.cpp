// Many threads on one Cache while eviction runs, following the threading rules of docs/cache.md:
// each thread owns sequences and steps them, adds, forks and releases them, and publishes and
// matches a shared prompt prefix, while the policy evicts across threads. Afterwards: every
// sequence a thread lost is in some thread's eviction report, the live sequences are exactly the
// unreported survivors, the page counts add up and equal a recount from the page tables,
// attention on every survivor equals the reference over what the cache holds, and releasing them
// all leaves no page in use. KVCACHE_STRESS_SECONDS sets the run time (default 2).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "cache_checks.hpp"
#include "kvcache/cache.hpp"
#include "kvcache/config.hpp"
#include "kvcache/registry.hpp"

namespace kvcache {
namespace {

constexpr int kThreads = 4;
const std::vector<std::int32_t> kPrompt = [] {  // the prefix every thread's prompts share
  std::vector<std::int32_t> t(48);
  std::iota(t.begin(), t.end(), 1000);
  return t;
}();

double stress_seconds() {
  const char* s = std::getenv("KVCACHE_STRESS_SECONDS");
  return s != nullptr && *s != '\0' ? std::atof(s) : 2.0;
}

// What every thread saw evicted, and what each lost without seeing it.
struct Ledger {
  std::mutex mutex;
  std::set<SeqId> preempted;
  std::size_t dropped_ranges = 0;
  std::set<SeqId> lost;  // not_found for a sequence its owner still held
  void note(const EvictionReport& r) {
    const std::lock_guard lock(mutex);
    for (const SeqId id : r.preempted) EXPECT_TRUE(preempted.insert(id).second) << id;
    dropped_ranges += r.dropped.size();
  }
};

class Worker {
 public:
  Worker(Cache& cache, Ledger& ledger, unsigned seed)
      : cache_(cache), ledger_(ledger), rng_(seed), m_(cache.model()) {}

  void run(std::chrono::steady_clock::time_point until) {
    while (std::chrono::steady_clock::now() < until) {
      try {
        one_operation();
      } catch (const EvictionError& e) {  // CacheFull too: what it evicted is reported
        ledger_.note(e.report());
        forget_preempted(e.report());
      } catch (const Error& e) {
        if (e.code() != Code::not_found) {
          ADD_FAILURE() << "unexpected error: " << e.what();
          return;
        }
        // Another thread's eviction took a sequence of this one: drop what is gone.
        const std::vector<SeqId> live = cache_.sequences();
        std::erase_if(mine_, [&](SeqId id) {
          if (std::find(live.begin(), live.end(), id) != live.end()) return false;
          const std::lock_guard lock(ledger_.mutex);
          ledger_.lost.insert(id);
          return true;
        });
      }
    }
  }

  const std::vector<SeqId>& sequences() const { return mine_; }
  std::size_t steps() const { return steps_; }

 private:
  void one_operation() {
    const unsigned op = rng_() % 12;
    if (mine_.size() < 2 || op == 0) {
      mine_.push_back(cache_.add_sequence(static_cast<std::int32_t>(rng_() % 101)));
    } else if (op == 1) {
      mine_.push_back(cache_.fork(pick()));
    } else if (op == 2) {
      const SeqId id = pick();
      cache_.release(id);
      std::erase(mine_, id);
    } else if (op == 3 && mine_.size() < 8) {
      prompt();
    } else {
      std::vector<SeqId> batch;
      for (int i = 0; i < 3 && i < static_cast<int>(mine_.size()); ++i) {
        const SeqId id = pick();
        if (std::find(batch.begin(), batch.end(), id) == batch.end()) batch.push_back(id);
      }
      step(batch, op == 4 ? 1 + rng_() % 8 : 1);
    }
  }

  // A new sequence that reuses the shared prompt's cached pages, fills in the rest and publishes
  // its own.
  void prompt() {
    const SeqId id = cache_.add_sequence();
    mine_.push_back(id);
    const std::uint64_t reused = cache_.match_prefix(id, kPrompt);
    if (reused < kPrompt.size()) step({id}, static_cast<std::uint32_t>(kPrompt.size() - reused));
    if (std::find(mine_.begin(), mine_.end(), id) != mine_.end())
      cache_.publish_prefix(id, kPrompt);
  }

  // One step of `count` tokens for each member: K/V on every layer, attention, finish.
  void step(const std::vector<SeqId>& batch, std::uint32_t count) {
    Step s = cache_.begin_step(batch, std::vector<std::uint32_t>(batch.size(), count));
    const auto rows = static_cast<std::int64_t>(s.tokens());
    std::vector<float> k(rows * m_.kv_heads * m_.head_dim), q(rows * m_.q_heads * m_.head_dim);
    std::vector<float> out(q.size());
    for (std::uint32_t layer = 0; layer < m_.layers && rows > 0; ++layer) {
      for (float& x : k) x = normal_(rng_);
      for (float& x : q) x = normal_(rng_);
      const Tensor kv = Tensor::host(k.data(), {rows, m_.kv_heads, m_.head_dim});
      s.append(layer, kv, kv);
      Tensor o = Tensor::host(out.data(), {rows, m_.q_heads, m_.head_dim});
      const Tensor qt = Tensor::host(q.data(), {rows, m_.q_heads, m_.head_dim});
      count == 1 ? s.decode(layer, qt, o) : s.prefill(layer, qt, o);
      for (const float x : out) ASSERT_TRUE(std::isfinite(x));
    }
    const EvictionReport report = s.finish();  // begin_step's evictions and the policy's hook
    ledger_.note(report);
    forget_preempted(report);
    ++steps_;
  }

  void forget_preempted(const EvictionReport& r) {
    for (const SeqId id : r.preempted) std::erase(mine_, id);
  }
  SeqId pick() { return mine_[rng_() % mine_.size()]; }

  Cache& cache_;
  Ledger& ledger_;
  std::mt19937 rng_;
  std::normal_distribution<float> normal_;
  const ModelShape m_;
  std::vector<SeqId> mine_;
  std::size_t steps_ = 0;
};

TEST(ConcurrentCache, ManyThreadsStepForkReleaseAndShareAPrefixWhileEvictionRuns) {
  // 2 layers x 2 KV heads x 32 dims of fp16 K and V: 512 bytes a token; 96 KiB holds about 190
  // tokens, so the threads' sequences keep the oldest-first policy busy.
  const auto cache =
      Cache::open(parse_config("model: {layers: 2, q_heads: 4, kv_heads: 2, head_dim: 32}\n"
                               "backend: [cpu-tbb]\n"
                               "cache: {page_size: 16, capacity: 96KiB, prefix_caching: true}\n"
                               "eviction: {name: oldest-first}\n",
                               "<concurrent test>", {}),
                  Registry::load(PluginSettings{}));
  Ledger ledger;
  std::vector<Worker> workers;
  for (int t = 0; t < kThreads; ++t) workers.emplace_back(*cache, ledger, 100 + t);
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(stress_seconds()));
  std::atomic<bool> counting = true;
  std::thread watcher([&] {  // the page counts add up at every moment, seen from outside
    while (counting) {
      const StoreStats st = cache->stats();
      EXPECT_EQ(st.used_pages + st.cached_pages + st.free_pages, st.total_pages);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  {
    std::vector<std::jthread> threads;
    for (Worker& w : workers) threads.emplace_back([&w, until] { w.run(until); });
  }
  counting = false;
  watcher.join();
  if (HasFailure()) return;

  // Every sequence lost was reported; the live ones are exactly the unreported survivors.
  std::set<SeqId> survivors;
  std::size_t steps = 0;
  for (const Worker& w : workers) {
    steps += w.steps();
    for (const SeqId id : w.sequences())
      if (!ledger.preempted.contains(id)) survivors.insert(id);
  }
  for (const SeqId id : ledger.lost) EXPECT_TRUE(ledger.preempted.contains(id)) << id;
  const std::vector<SeqId> live = cache->sequences();
  EXPECT_EQ(std::set<SeqId>(live.begin(), live.end()), survivors);
  EXPECT_GT(ledger.preempted.size(), 0u) << "the load should make the policy preempt";
  std::printf("%d threads, %.1f s: %zu steps, %zu sequences preempted, %zu survive\n", kThreads,
              stress_seconds(), steps, ledger.preempted.size(), survivors.size());

  // Page counts equal a recount: pages referenced by the survivors' page tables are the used
  // ones (shared pages once).
  const std::vector<SeqId> ids(survivors.begin(), survivors.end());
  testing::expect_pages_add_up(*cache);

  std::mt19937 rng(5);
  for (const SeqId id : ids) {
    testing::expect_attention_equals_the_reference(*cache, id, rng);
    if (HasFatalFailure()) return;
  }
  for (const SeqId id : ids) cache->release(id);
  const StoreStats after = cache->stats();
  EXPECT_EQ(after.used_pages, 0u);
  EXPECT_EQ(after.cached_pages + after.free_pages, after.total_pages) << "pages leaked";
}

// cpu-tbb lets appends share the store's lock (different sequences at once); two that overlap on
// one sequence would race on its slots, so the later is refused, loudly, while the first writes.
// One-row appends race a long one, round after round, until one of them has been refused. The
// one-row appends start only once the long one is about to: on a loaded machine a thread that
// started earlier could use up its rows before the long append began (no overlap, and no test).
TEST(ConcurrentStore, OverlappingAppendsToOneSequenceAreRefused) {
  const Config config = parse_config(
      "model: {layers: 1, q_heads: 4, kv_heads: 4, head_dim: 64}\ncache: {capacity: 64MiB}\n",
      "<concurrent test>", {});
  // One thread inside each append (no oneTBB workers): the race is between the two callers, and
  // ThreadSanitizer cannot see oneTBB's own synchronization (docs/testing.md, "Sanitizers").
  const auto backend =
      Registry::load(PluginSettings{})->create_backend("cpu-tbb", nlohmann::json{{"threads", 1}});
  const auto store = backend->create_store(store_spec(config));
  const SeqId id = store->create_sequence();
  const std::vector<SeqId> ids{id};
  constexpr std::uint32_t kLong = 16384, kShortMost = 4096;
  constexpr int kRounds = 200;  // a round is a few milliseconds; most runs need one
  const std::vector<float> rows(std::size_t{kLong} * 4 * 64, 0.5f);
  const Tensor long_rows = Tensor::host(rows.data(), {kLong, 4, 64});
  const Tensor one_row = Tensor::host(rows.data(), {1, 4, 64});
  int refused = 0, rounds = 0;
  for (; rounds < kRounds && refused == 0; ++rounds) {
    store->reserve(ids, std::vector<std::uint32_t>{kLong + kShortMost});
    std::atomic<bool> go = false, done = false;
    std::uint64_t short_appends = 0;
    std::thread other([&] {
      while (!go) std::this_thread::yield();
      while (!done && short_appends < kShortMost) {
        try {
          store->append(0, ids, std::vector<std::uint32_t>{1}, one_row, one_row);
          ++short_appends;
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("is being appended to by another thread"),
                    std::string::npos)
              << e.what();
          ++refused;
        }
      }
    });
    go = true;
    for (;;) {  // the long append, retried while a short one holds the sequence
      try {
        store->append(0, ids, std::vector<std::uint32_t>{kLong}, long_rows, long_rows);
        break;
      } catch (const Error&) {
      }
    }
    done = true;
    other.join();
    EXPECT_EQ(store->written(id, 0), short_appends + kLong)
        << "every append that was not refused wrote its rows, and only those";
    store->unreserve(id, store->length(id));
  }
  EXPECT_GT(refused, 0) << "no one-row append overlapped a long one in " << rounds << " rounds";
}

}  // namespace
}  // namespace kvcache
