#include "tier_benchmark.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "kvcache/cache.hpp"
#include "kvcache/formats.hpp"
#include "kvcache/status.hpp"
#include "kvcache/tensor.hpp"
#include "synthetic_rows.hpp"

namespace kvcache::tool {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

// Writes `ids` into a new sequence of `cache`, 512 tokens a step: every layer's K and V and, when
// `prefill`, the causal prefill attention of those tokens. Returns the sequence.
SeqId fill(Cache& cache, const ModelShape& m, std::span<const std::int32_t> ids, bool prefill,
           SyntheticRows& rows) {
  const SeqId id = cache.add_sequence();
  constexpr std::size_t kChunk = 512;
  std::vector<float> k, v, q, out;
  for (std::size_t at = 0; at < ids.size(); at += kChunk) {
    const auto n = static_cast<std::uint32_t>(std::min(kChunk, ids.size() - at));
    auto step = cache.begin_step(id, n);
    k.resize(std::size_t{n} * m.kv_heads * m.head_dim);
    v.resize(k.size());
    q.resize(std::size_t{n} * m.q_heads * m.head_dim);
    out.resize(q.size());
    for (std::uint32_t layer = 0; layer < m.layers; ++layer) {
      rows.fill(k, m.head_dim);
      rows.fill(v, m.head_dim);
      step.append(layer, Tensor::host(k.data(), {n, m.kv_heads, m.head_dim}),
                  Tensor::host(v.data(), {n, m.kv_heads, m.head_dim}));
      if (prefill) {
        rows.fill(q, m.head_dim);
        step.prefill(layer, Tensor::host(q.data(), {n, m.q_heads, m.head_dim}),
                     Tensor::host(out.data(), {n, m.q_heads, m.head_dim}));
      }
    }
    (void)step.finish();
  }
  return id;
}

// A loopback port that nothing listens on (bound by the system, then closed).
int closed_port() {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof a;
  bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &n);
  close(s);
  return ntohs(a.sin_port);
}

// The host that published the prompt waits for its queue to drain: what was written, how fast.
nlohmann::json measure_writes(Cache& source, const ModelShape& m, std::span<const std::int32_t> ids,
                              SyntheticRows& rows) {
  const SeqId id = fill(source, m, ids, false, rows);
  const auto start = Clock::now();
  source.publish_prefix(id, ids);
  const bool drained = source.flush_remote(std::chrono::minutes(2));
  const double seconds = since(start);
  const remote::TierStats s = *source.remote_stats();
  return {{"drained", drained},
          {"pages", s.written_pages},
          {"bytes", s.bytes_written},
          {"value_bytes", s.written_pages ? s.bytes_written / s.written_pages : 0},
          {"seconds", seconds},
          {"gbps", static_cast<double>(s.bytes_written) / seconds / 1e9},
          {"dropped", s.dropped_writes},
          {"failures", s.failures}};
}

// Lookups of prefixes of 16, 128 and 1024 pages by a host with no pages of its own.
nlohmann::json measure_lookups(const Config& config,
                               const std::shared_ptr<const Registry>& registry,
                               std::span<const std::int32_t> ids, const TierBenchOptions& o) {
  const auto reader = Cache::open(config, registry);
  nlohmann::json lookups = nlohmann::json::array();
  for (const std::uint32_t n : {16u, 128u, 1024u}) {
    if (n > o.pages) continue;
    const std::span<const std::int32_t> prefix(ids.data(), std::size_t{n} * config.cache.page_size);
    std::vector<double> us;
    std::uint64_t found = 0;
    for (std::uint32_t r = 0; r < o.repeats; ++r) {
      const auto start = Clock::now();
      found = reader->lookup_prefix(prefix);
      us.push_back(since(start) * 1e6);
    }
    lookups.push_back({{"pages", n},
                       {"found_pages", found / config.cache.page_size},
                       {"p50_us", percentile(us, 0.5)},
                       {"p99_us", percentile(us, 0.99)}});
  }
  return lookups;
}

// A dead store: the same transport at a loopback port nothing listens on. Lookups pay its
// failures until the breaker opens, then nothing of the store.
nlohmann::json measure_dead_store(const Config& config,
                                  const std::shared_ptr<const Registry>& registry,
                                  std::span<const std::int32_t> ids, const TierBenchOptions& o) {
  Config dead = config;
  dead.remote->endpoints = {"127.0.0.1:" + std::to_string(closed_port())};
  const auto host = Cache::open(dead, registry);
  const std::span<const std::int32_t> prefix(
      ids.data(), std::size_t{std::min(o.pages, 16u)} * config.cache.page_size);
  std::vector<double> until_open, after;
  for (std::uint32_t i = 0; i < dead.remote->breaker_failures + 20; ++i) {
    const auto start = Clock::now();
    (void)host->lookup_prefix(prefix);
    (i < dead.remote->breaker_failures ? until_open : after).push_back(since(start) * 1e6);
  }
  return {{"failures_to_open", dead.remote->breaker_failures},
          {"until_open_us", until_open},
          {"after_p50_us", percentile(after, 0.5)},
          {"after_p99_us", percentile(after, 0.99)}};
}

}  // namespace

nlohmann::json run_tier_benchmark(Config config, const std::shared_ptr<const Registry>& registry,
                                  const TierBenchOptions& o) {
  if (!config.remote)
    throw Error(Code::invalid_argument,
                "bench tier: the config has no remote: section (docs/remote-tier.md)");
  if (o.pages == 0 || o.repeats == 0)
    throw Error(Code::invalid_argument, "bench tier: pages and repeats must be > 0");
  const ModelShape& m = config.model;
  const std::uint32_t page = config.cache.page_size;
  const std::uint64_t page_bytes = page_cost(store_spec(config, *registry));
  config.cache.capacity_bytes = (o.pages + 4ull) * page_bytes;
  // The write queue holds the whole prompt: the writes measured are the store's, not drops.
  config.remote->queue_bytes = std::max(config.remote->queue_bytes, 2 * o.pages * page_bytes);
  Config local = config;  // the same host without the tier: it recomputes
  local.remote.reset();

  // Token ids of this run alone, so that values an earlier run left in the store are not found.
  std::vector<std::int32_t> ids(std::size_t{o.pages} * page), others(ids.size());
  std::mt19937 random(std::random_device{}());
  std::uniform_int_distribution<std::int32_t> token(0, 49151);
  for (std::int32_t& id : ids) id = token(random);
  for (std::int32_t& id : others) id = token(random);
  const std::span<const std::int32_t> other(others);
  SyntheticRows rows(7);
  nlohmann::json result = {{"pages", o.pages},
                           {"page_size", page},
                           {"k_format", config.k_format.name},
                           {"v_format", config.v_format.name}};

  // Writes: one host publishes the prompt and waits for the queue to drain. It lives to the end:
  // an in-process (memory) space lasts while a host names it.
  const auto source = Cache::open(config, registry);
  result["write"] = measure_writes(*source, m, ids, rows);

  // Lookups: a host with no pages of its own asks how much of a prefix the store holds.
  result["lookups"] = measure_lookups(config, registry, ids, o);

  // Pulls against recomputing: per prompt length, a fresh host matches the prefix (pulling,
  // verifying and importing its pages), and another one without the tier computes them.
  nlohmann::json lengths = nlohmann::json::array();
  std::uint32_t break_even = 0;
  for (std::uint32_t n = 1; n <= o.pages; n *= 4) {
    const std::span<const std::int32_t> prefix(ids.data(), std::size_t{n} * page);
    std::vector<double> pull, recompute;
    std::uint64_t bytes = 0, reused = 0;
    double cold = 0;
    {
      // The first pull lands in a fresh host's pool, whose memory the import touches first; the
      // next ones in a host that has run: before each, another sequence fills the pool (room for
      // n pages: the pages pulled last are evicted) and is released.
      Config sized = config;
      sized.cache.capacity_bytes = std::uint64_t{n} * page_bytes;
      const auto host = Cache::open(sized, registry);
      for (std::uint32_t r = 0; r <= std::min<std::uint32_t>(o.repeats, 5); ++r) {
        if (r > 0) host->release(fill(*host, m, other.subspan(0, prefix.size()), false, rows));
        const SeqId id = host->add_sequence();
        const std::uint64_t before = host->remote_stats()->bytes_read;
        const auto start = Clock::now();
        reused = host->match_prefix(id, prefix);
        (r == 0 ? cold : pull.emplace_back()) = since(start);
        bytes = host->remote_stats()->bytes_read - before;
        host->release(id);
      }
    }
    // Recomputing grows with the square of the length (causal attention): up to 64 pages.
    if (n <= 64)
      for (std::uint32_t r = 0; r < 3; ++r) {
        const auto host = Cache::open(local, registry);
        const auto start = Clock::now();
        fill(*host, m, prefix, true, rows);
        recompute.push_back(since(start));
      }
    const double pull_s = percentile(pull, 0.5);
    nlohmann::json entry = {{"pages", n},
                            {"reused_tokens", reused},
                            {"pull_ms", pull_s * 1e3},
                            {"pull_gbps", static_cast<double>(bytes) / pull_s / 1e9},
                            {"cold_pull_ms", cold * 1e3}};
    if (!recompute.empty()) {
      const double recompute_s = percentile(recompute, 0.5);
      entry["recompute_ms"] = recompute_s * 1e3;
      if (break_even == 0 && reused == prefix.size() && pull_s < recompute_s) break_even = n;
    }
    lengths.push_back(entry);
  }
  result["lengths"] = lengths;
  result["break_even_pages"] = break_even;  // 0: not within the lengths recomputed

  if (config.remote->transport.name != "memory")
    result["dead_store"] = measure_dead_store(config, registry, ids, o);
  return result;
}

}  // namespace kvcache::tool
