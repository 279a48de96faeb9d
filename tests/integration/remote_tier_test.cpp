// The remote tier through the Cache (docs/remote-tier.md): two Caches of one process share
// prefix pages through a `memory` transport as two hosts would through a server, byte for byte,
// in every format; and every fault of the store (dead, slow, full, lying, evicting) ends with
// fewer tokens reused, counted, and never a wrong one or an error to the engine.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvcache/cache.hpp"
#include "kvcache/registry.hpp"
#include "kvcache/remote/memory_byte_store.hpp"
#include "kvcache/tensor.hpp"
#include "memcached_server.hpp"
#include "redis_cluster.hpp"
#include "redis_server.hpp"
#include "test_registry.hpp"
#include "tier_prompts.hpp"

namespace kvcache {
namespace {

using remote::MemoryFaults;
using remote::MemorySpace;
using remote::TierStats;
using ::testing::HasSubstr;

using testing::kDim;
using testing::kKv;
using testing::kLayers;
using testing::kPage;
using testing::kQ;
using testing::prompt;
using testing::rows;
using testing::write;

std::shared_ptr<const Registry> registry() {
  return testing::test_registry();
}

// A Cache of the tiny model whose remote section starts with `transport` (its transport and
// endpoints); `extra` adds to the section, `format` and `capacity` set the cache's.
std::unique_ptr<Cache> open_with(const std::string& transport, const std::string& extra = "",
                                 const std::string& format = "fp16",
                                 const std::string& capacity = "1MiB",
                                 const std::string& backend = "cpu-tbb") {
  return Cache::open(parse_config(testing::tiny_config(transport + ", model: tiny@1" + extra,
                                                       format, capacity, backend),
                                  "<test>", {}),
                     registry());
}

// The same, sharing the memory space `space`.
std::unique_ptr<Cache> open(const std::string& space, const std::string& extra = "",
                            const std::string& format = "fp16",
                            const std::string& capacity = "1MiB",
                            const std::string& backend = "cpu-tbb") {
  return open_with("transport: memory, endpoints: [" + space + "]", extra, format, capacity,
                   backend);
}

// Writes `ids` into a new sequence of `cache`, publishes it and waits for the writes.
void publish(Cache& cache, const std::vector<std::int32_t>& ids) {
  const SeqId a = cache.add_sequence();
  write(cache, a, ids, 0);
  cache.publish_prefix(a, ids);
  ASSERT_TRUE(cache.flush_remote(std::chrono::seconds(10)));
}

// Matches `ids` in a new sequence of `cache`; checks that every page it attached holds the same
// bytes as `source`'s page for the same tokens. Returns the tokens reused.
std::uint64_t match_and_compare(Cache& cache, Cache& source, const std::vector<std::int32_t>& ids) {
  const SeqId b = cache.add_sequence();
  const std::uint64_t matched = cache.match_prefix(b, ids);
  const SeqId s = source.add_sequence();
  EXPECT_EQ(source.match_prefix(s, ids), ids.size() / kPage * kPage) << "the source lost its pages";
  const PageTable mine = cache.store().page_table(std::vector<SeqId>{b});
  const PageTable theirs = source.store().page_table(std::vector<SeqId>{s});
  for (std::size_t i = 0; i < matched / kPage; ++i)
    for (std::uint32_t layer = 0; layer < kLayers; ++layer)
      for (std::uint32_t h = 0; h < kKv; ++h)
        for (const bool value : {false, true})
          EXPECT_EQ(cache.store().read_tile(mine.indices[i], layer, h, value),
                    source.store().read_tile(theirs.indices[i], layer, h, value))
              << "page " << i << " layer " << layer << " head " << h;
  source.release(s);
  return matched;
}

std::string space_name() {
  static int n = 0;
  return "shared-tier-test-" + std::to_string(++n);
}

// Over the memory transport, a real redis-server (resp) and a real memcached, in every format, and
// a real Redis Cluster (resp-cluster) in two.
class RemoteTierFormats : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  void SetUp() override {
    if (redis_ && !redis_->available()) GTEST_SKIP() << redis_->why();
    if (memcached_ && !memcached_->available()) GTEST_SKIP() << memcached_->why();
    if (cluster_ && !cluster_->available()) GTEST_SKIP() << cluster_->why();
  }
  std::unique_ptr<Cache> make() {
    const std::string& format = std::get<1>(GetParam());
    if (redis_)
      return open_with("transport: resp, endpoints: ['" + redis_->endpoint() + "']", "", format);
    if (memcached_)
      return open_with("transport: memcached, endpoints: ['" + memcached_->endpoint() + "']", "",
                       format);
    if (cluster_)
      return open_with("transport: {name: resp, cluster: true}, endpoints: ['" +
                           cluster_->nodes()[0]->endpoint() + "']",
                       "", format);
    return open(space_, "", format);
  }
  std::size_t values_held() const {
    if (redis_) return std::stoul(redis_->cli("DBSIZE"));
    if (memcached_) return static_cast<std::size_t>(memcached_->stat("curr_items"));
    if (cluster_) {
      std::size_t n = 0;
      for (std::size_t i = 0; i < cluster_->nodes().size(); ++i)
        if (cluster_->is_master(i)) n += std::stoul(cluster_->nodes()[i]->cli("DBSIZE"));
      return n;
    }
    return MemorySpace::named(space_)->size();
  }

  const std::string space_ = space_name();
  const std::string& transport_ = std::get<0>(GetParam());
  const std::unique_ptr<testing::RedisServer> redis_ =
      transport_ == "resp" ? std::make_unique<testing::RedisServer>() : nullptr;
  const std::unique_ptr<testing::MemcachedServer> memcached_ =
      transport_ == "memcached" ? std::make_unique<testing::MemcachedServer>() : nullptr;
  const std::unique_ptr<testing::RedisCluster> cluster_ =
      transport_ == "resp-cluster" ? std::make_unique<testing::RedisCluster>() : nullptr;
};

TEST_P(RemoteTierFormats, TwoCachesShareAPrefixByteForByte) {
  const auto a = make(), b = make();
  const std::vector<std::int32_t> ids = prompt(5 * kPage + 3);
  publish(*a, ids);
  TierStats written = *a->remote_stats();
  EXPECT_EQ(written.queued_pages, 5u);
  EXPECT_EQ(written.written_pages, 5u);
  EXPECT_EQ(values_held(), 5u);

  const StoreStats before = b->stats();
  EXPECT_EQ(b->lookup_prefix(ids), 5u * kPage);
  EXPECT_EQ(b->stats().cached_pages, before.cached_pages) << "a lookup imported pages";
  EXPECT_EQ(match_and_compare(*b, *a, ids), 5u * kPage);
  const TierStats read = *b->remote_stats();
  EXPECT_EQ(read.hit_pages, 5u);
  EXPECT_EQ(read.miss_pages, 0u);
  EXPECT_EQ(read.corrupt, 0u);

  // Attention over the shared pages equals attention over the pages written here.
  std::vector<float> q(kQ * kDim), out_a(q.size()), out_b(q.size());
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (float& x : q) x = normal(rng);
  const std::vector<std::int32_t> next{ids[5 * kPage]};
  for (Cache* cache : {a.get(), b.get()}) {
    const SeqId id = cache->add_sequence();
    ASSERT_EQ(cache->match_prefix(id, ids), 5u * kPage);
    auto step = cache->begin_step(id, 1);
    for (std::uint32_t layer = 0; layer < kLayers; ++layer) {
      const auto k = rows(next, 5 * kPage, layer, false), v = rows(next, 5 * kPage, layer, true);
      step.append(layer, Tensor::host(k.data(), {1, kKv, kDim}),
                  Tensor::host(v.data(), {1, kKv, kDim}));
      step.decode(layer, Tensor::host(q.data(), {1, kQ, kDim}),
                  Tensor::host(cache == a.get() ? out_a.data() : out_b.data(), {1, kQ, kDim}));
    }
    (void)step.finish();
  }
  EXPECT_EQ(out_a, out_b);

  // A third host publishing the same prompt finds every page there and writes none.
  const auto c = make();
  publish(*c, ids);
  EXPECT_EQ(c->remote_stats()->present_pages, 5u);
  EXPECT_EQ(c->remote_stats()->written_pages, 0u);
}

std::string remote_tier_case_name(
    const ::testing::TestParamInfo<std::tuple<std::string, std::string>>& info) {
  std::string name = std::get<0>(info.param) + "_" + std::get<1>(info.param);
  if (std::get<1>(info.param).starts_with("{"))
    name = std::get<0>(info.param) + "_kivi-k_int8-per-token";
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(
    Formats, RemoteTierFormats,
    ::testing::Combine(::testing::Values("memory", "resp", "memcached"),
                       ::testing::Values("fp32", "fp16", "bf16", "fp8-e4m3", "int8-per-token",
                                         "int4-group",
                                         "{k: {name: kivi-k, group: 8}, v: int8-per-token}")),
    remote_tier_case_name);
INSTANTIATE_TEST_SUITE_P(Cluster, RemoteTierFormats,
                         ::testing::Combine(::testing::Values("resp-cluster"),
                                            ::testing::Values("fp16", "int4-group")),
                         remote_tier_case_name);

class RemoteTier : public ::testing::Test {
 protected:
  const std::string space = space_name();
  std::shared_ptr<MemorySpace> store = MemorySpace::named(space);
  std::unique_ptr<Cache> a = open(space);
  const std::vector<std::int32_t> ids = prompt(5 * kPage);
};

TEST_F(RemoteTier, ADeadStoreIsAMissAndItsBreakerOpens) {
  publish(*a, ids);
  store->set_faults({.down = true});
  const auto b = open(space, ", breaker: {failures: 2, open_ms: 60000}");
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b->match_prefix(b->add_sequence(), ids), 0u);
  const TierStats s = *b->remote_stats();
  EXPECT_EQ(s.failures, 2u) << "the breaker opens after two failures";
  EXPECT_EQ(s.skipped, 2u);
  EXPECT_EQ(s.miss_pages, 4u * 5);
  EXPECT_EQ(b->lookup_prefix(ids), 0u);
  // Writes to a dead store are dropped, counted, and never wait.
  const auto c = open(space);
  const SeqId id = c->add_sequence();
  write(*c, id, ids, 0);
  c->publish_prefix(id, ids);
  EXPECT_TRUE(c->flush_remote(std::chrono::seconds(10)));
  EXPECT_EQ(c->remote_stats()->dropped_writes, 5u);
  EXPECT_EQ(c->remote_stats()->written_pages, 0u);
  // Back up: the pages hit again (b's breaker stays open for its period; a new host asks).
  store->set_faults({});
  const auto d = open(space);
  EXPECT_EQ(match_and_compare(*d, *a, ids), 5u * kPage);
}

// Which key holds page i of `ids`: the tier writes pages in order, and the space keeps them by
// key; the page's index is in its header.
std::string key_of_page(MemorySpace& space, std::uint64_t index) {
  for (const std::string& key : space.keys()) {
    bool match = false;
    space.mutate(key, [&](remote::Value& v) {
      std::uint64_t at = 0;
      for (int i = 0; i < 8; ++i)
        at |= std::uint64_t(std::to_integer<std::uint8_t>(v[16 + 128 + 8 + i])) << (8 * i);
      match = at == index;
    });
    if (match) return key;
  }
  return {};
}

TEST_F(RemoteTier, ALyingStoreCostsHitsNeverCorrectness) {
  publish(*a, ids);
  const std::uint64_t header = 16 + 128 + 16 + 12 * kPage + 8 + 16;
  struct Lie {
    const char* what;
    std::uint64_t page;
    std::function<void(remote::Value&, const remote::Value& first_page)> change;
  };
  const std::vector<Lie> lies = {
      {"a flipped payload bit", 3,
       [&](remote::Value& v, const remote::Value&) { v[header + 100] ^= std::byte{4}; }},
      {"a forged format fingerprint", 2,
       [](remote::Value& v, const remote::Value&) { v[16 + 40] ^= std::byte{1}; }},
      {"a truncated value", 1,
       [](remote::Value& v, const remote::Value&) { v.resize(v.size() / 2); }},
      {"another page's value", 4, [](remote::Value& v, const remote::Value& first) { v = first; }}};
  for (const Lie& lie : lies) {
    SCOPED_TRACE(lie.what);
    store->clear();
    publish(*open(space), ids);
    remote::Value first;
    store->mutate(key_of_page(*store, 0), [&](remote::Value& v) { first = v; });
    const std::string key = key_of_page(*store, lie.page);
    ASSERT_FALSE(key.empty());
    ASSERT_TRUE(store->mutate(key, [&](remote::Value& v) { lie.change(v, first); }));
    const auto b = open(space);
    EXPECT_EQ(match_and_compare(*b, *a, ids), lie.page * kPage);
    EXPECT_EQ(b->remote_stats()->corrupt, 1u);
    EXPECT_EQ(b->remote_stats()->hit_pages, lie.page);
    EXPECT_EQ(store->size(), 4u) << "the wrong value is removed";
  }
  // A store that lies in flight (every value it returns is altered): nothing is taken.
  store->clear();
  publish(*open(space), ids);
  store->set_faults(
      {.tamper = [](const std::string&, remote::Value& v) { v.back() ^= std::byte{1}; }});
  const auto b = open(space);
  EXPECT_EQ(match_and_compare(*b, *a, ids), 0u);
  EXPECT_EQ(b->remote_stats()->corrupt, 1u);
}

TEST_F(RemoteTier, PagesGoneFromTheStoreAreMisses) {
  store->set_faults({.capacity = 3});  // the store keeps the newest three pages (LRU)
  publish(*a, ids);
  EXPECT_EQ(store->size(), 3u);
  const auto b = open(space);
  EXPECT_EQ(match_and_compare(*b, *a, ids), 0u) << "page 0 was evicted: the chain starts there";
  store->set_faults({});
  store->clear();
  publish(*open(space), ids);
  store->set_faults({.vanish_after_probe = true});  // evicted between the probe and the get
  const auto c = open(space);
  EXPECT_EQ(match_and_compare(*c, *a, ids), 0u);
  EXPECT_EQ(c->remote_stats()->miss_pages, 5u);
  EXPECT_EQ(c->remote_stats()->corrupt, 0u);
}

TEST_F(RemoteTier, OnlyTheSameNamespaceModelAndFormatShare) {
  ::setenv("KVCACHE_TEST_SALT_A", "alpha", 1);
  ::setenv("KVCACHE_TEST_SALT_B", "beta", 1);
  const std::string salted = ", namespace: {label: t, salt_env: KVCACHE_TEST_SALT_A}";
  publish(*open(space, salted), ids);
  EXPECT_EQ(open(space, salted)->lookup_prefix(ids), 5u * kPage);
  EXPECT_EQ(
      open(space, ", namespace: {label: t, salt_env: KVCACHE_TEST_SALT_B}")->lookup_prefix(ids),
      0u);
  EXPECT_EQ(open(space)->lookup_prefix(ids), 0u) << "no salt is another namespace";
  const std::string other_model =
      "model: {layers: 2, q_heads: 4, kv_heads: 2, head_dim: 32}\n"
      "cache: {page_size: 16, capacity: 1MiB}\n"
      "remote: {transport: memory, endpoints: [" +
      space + "], model: tiny@2, namespace: {label: t, salt_env: KVCACHE_TEST_SALT_A}}\n";
  EXPECT_EQ(Cache::open(parse_config(other_model, "<test>", {}), registry())->lookup_prefix(ids),
            0u);
  EXPECT_EQ(open(space, salted, "int8-per-token")->lookup_prefix(ids), 0u);
  EXPECT_THROW(open(space, ", namespace: {salt_env: KVCACHE_TEST_SALT_UNSET}"), Error);
}

TEST_F(RemoteTier, ASlowStoreIsCutByTheDeadline) {
  publish(*a, ids);
  store->set_faults({.delay = std::chrono::milliseconds(40)});
  const auto b = open(space, ", read: {batch_pages: 1, deadline_ms: 100}");
  const auto start = std::chrono::steady_clock::now();
  const std::uint64_t matched = match_and_compare(*b, *a, ids);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(matched, 5u * kPage) << "five pages take ten calls of 40 ms";
  EXPECT_LT(took, std::chrono::milliseconds(1000));
  EXPECT_EQ(b->remote_stats()->miss_pages, 5 - matched / kPage);
}

TEST_F(RemoteTier, AFullWriteQueueDropsAndNeverBlocks) {
  store->set_faults({.delay = std::chrono::milliseconds(200)});
  const auto c = open(space, ", write: {queue: 40KiB}");  // about two pages of fp16
  const SeqId id = c->add_sequence();
  write(*c, id, ids, 0);
  const auto start = std::chrono::steady_clock::now();
  c->publish_prefix(id, ids);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(150));
  EXPECT_TRUE(c->flush_remote(std::chrono::seconds(10)));
  const TierStats s = *c->remote_stats();
  EXPECT_GT(s.dropped_writes, 0u);
  EXPECT_EQ(s.queued_pages + s.dropped_writes, 5u);
  EXPECT_EQ(s.written_pages, s.queued_pages);
}

TEST_F(RemoteTier, NoLocalRoomEndsThePullEarly) {
  publish(*a, ids);
  // b holds 4 pages, 2 of them taken by a sequence of its own.
  const auto b = open(space, "", "fp16", "33KiB");
  ASSERT_EQ(b->stats().total_pages, 4u);
  const SeqId busy = b->add_sequence();
  write(*b, busy, prompt(2 * kPage, 9), 0);
  EXPECT_EQ(match_and_compare(*b, *a, ids), 2u * kPage);
  EXPECT_EQ(b->remote_stats()->no_room, 1u);
}

TEST_F(RemoteTier, AStoreWithoutPagesThatTravelWorksWithoutATier) {
  const auto b = open(space, "", "fp16", "1MiB", "test-faulty");
  EXPECT_FALSE(b->remote_stats().has_value());
  const SeqId id = b->add_sequence();
  write(*b, id, ids, 0);
  b->publish_prefix(id, ids);
  EXPECT_TRUE(b->flush_remote());
  EXPECT_EQ(store->size(), 0u);
}

TEST_F(RemoteTier, AnUnknownTransportIsNamed) {
  const std::string yaml = "remote: {transport: memroy, endpoints: [x], model: m}\n";
  try {
    Cache::open(parse_config(yaml, "<test>", {}), registry());
    FAIL() << "opened with an unknown transport";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("did you mean 'memory'"));
  }
  const auto diagnostics = check_components(parse_config(yaml, "<test>", {}), *registry());
  ASSERT_FALSE(diagnostics.empty());
  EXPECT_EQ(diagnostics.back().key, "remote.transport");
  EXPECT_EQ(diagnostics.back().where.line, 1);
}

// The faults that only a real server has: killed mid-run, and a value edited at rest.
class RemoteTierOverRedis : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!server.available()) GTEST_SKIP() << server.why();
  }
  std::unique_ptr<Cache> make(const std::string& extra = "") {
    return open_with(
        "transport: {name: resp, connect_timeout_ms: 100, timeout_ms: 300}, "
        "endpoints: ['" +
            server.endpoint() + "']",
        extra);
  }

  testing::RedisServer server;
  const std::vector<std::int32_t> ids = prompt(5 * kPage);
};

TEST_F(RemoteTierOverRedis, AKilledServerIsAMissAndWritesAreDropped) {
  const auto a = make();
  publish(*a, ids);
  server.kill();
  const auto b = make();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(b->match_prefix(b->add_sequence(), ids), 0u);
  EXPECT_EQ(b->lookup_prefix(ids), 0u);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_GE(b->remote_stats()->failures, 1u);
  EXPECT_EQ(b->remote_stats()->hit_pages, 0u);
  const auto c = make();
  const SeqId id = c->add_sequence();
  write(*c, id, prompt(3 * kPage, 2), 0);
  c->publish_prefix(id, prompt(3 * kPage, 2));
  EXPECT_TRUE(c->flush_remote(std::chrono::seconds(10)));
  EXPECT_EQ(c->remote_stats()->dropped_writes, 3u);
}

TEST_F(RemoteTierOverRedis, AValueEditedAtRestIsRefusedAndRemoved) {
  const auto a = make();
  publish(*a, ids);
  // The key of page 2: its header's page index (bytes 152 to 159) is 2.
  std::string key;
  std::istringstream keys(server.cli("--scan"));
  for (std::string k; std::getline(keys, k);)
    if (server.cli("--no-raw GETRANGE " + k + " 152 152").starts_with("\"\\x02")) key = k;
  ASSERT_FALSE(key.empty()) << server.cli("--scan");
  const std::uint64_t header = 16 + 128 + 16 + 12 * kPage + 8 + 16;
  server.cli("SETRANGE " + key + " " + std::to_string(header + 10) + " X");
  const auto b = make();
  EXPECT_EQ(match_and_compare(*b, *a, ids), 2u * kPage);
  EXPECT_EQ(b->remote_stats()->corrupt, 1u);
  EXPECT_EQ(server.cli("EXISTS " + key), "0\n") << "the wrong value is removed";
}

// Hosts on threads of their own (a Cache each, as processes would have) publish and match
// through one space while their writers send: the transport, the queues and the counters are
// shared across threads (ThreadSanitizer runs this case: its name holds "Concurrent").
TEST(ConcurrentRemoteTier, HostsPublishAndMatchWhileTheirWritersRun) {
  const std::string space = space_name();
  const auto store = MemorySpace::named(space);  // lives while the hosts come and go
  constexpr int kHosts = 3;
  std::atomic<int> flushed{0};
  std::vector<std::thread> hosts;
  for (int h = 0; h < kHosts; ++h)
    hosts.emplace_back([&, h] {
      const auto cache = open(space);
      publish(*cache, prompt(4 * kPage, 10 + h));
      publish(*cache, prompt(3 * kPage, 99));  // the same prompt on every host
      ++flushed;
      while (flushed < kHosts) std::this_thread::yield();
      for (int other = 0; other < kHosts; ++other) {
        const SeqId id = cache->add_sequence();
        EXPECT_EQ(cache->match_prefix(id, prompt(4 * kPage, 10 + other)), 4u * kPage);
      }
      const TierStats s = *cache->remote_stats();
      EXPECT_EQ(s.hit_pages, 4u * (kHosts - 1));
      EXPECT_EQ(s.corrupt, 0u);
      EXPECT_EQ(s.written_pages + s.present_pages, 7u);
    });
  for (std::thread& t : hosts) t.join();
  EXPECT_EQ(store->size(), 4u * kHosts + 3);
}

// Tenants separated by the server: an ACL user limited to its label's keys (~kvc1:<label>:*)
// shares its own pages; used for another label, every read and write is refused (NOPERM), which
// the tier takes as misses and drops.
TEST_F(RemoteTierOverRedis, AnAclUserReachesOnlyItsNamespace) {
  server.cli("ACL SETUSER tenant-b on '>secret' '~kvc1:tenant-b:*' +@all");
  ::setenv("KVCACHE_TEST_REDIS_PASSWORD", "secret", 1);
  const std::string as_b =
      "transport: {name: resp, username: tenant-b, password_env: "
      "KVCACHE_TEST_REDIS_PASSWORD}, endpoints: ['" +
      server.endpoint() + "']";
  const auto own = open_with(as_b, ", namespace: {label: tenant-b}");
  publish(*own, ids);
  EXPECT_EQ(own->remote_stats()->written_pages, 5u);
  EXPECT_EQ(open_with(as_b, ", namespace: {label: tenant-b}")->lookup_prefix(ids), 5u * kPage);
  // Tenant a's pages, written by a user who may: tenant b's user can neither read nor add to them.
  const std::string as_default = "transport: resp, endpoints: ['" + server.endpoint() + "']";
  publish(*open_with(as_default, ", namespace: {label: tenant-a}"), prompt(2 * kPage, 4));
  const auto intruder = open_with(as_b, ", namespace: {label: tenant-a}");
  EXPECT_EQ(intruder->match_prefix(intruder->add_sequence(), prompt(2 * kPage, 4)), 0u);
  EXPECT_GE(intruder->remote_stats()->failures, 1u);
  publish(*intruder, prompt(2 * kPage, 5));
  EXPECT_EQ(intruder->remote_stats()->written_pages, 0u);
  EXPECT_EQ(intruder->remote_stats()->dropped_writes, 2u);
  EXPECT_EQ(server.cli("DBSIZE"), "7\n") << "tenant b's five pages and tenant a's two";
}

// A server bounded by maxmemory evicts (allkeys-lru) as it takes more: the writes go on, never an
// error, and a reader gets the verified run that is left, byte for byte.
TEST(RemoteTierOverABoundedRedis, ServerEvictionCostsHitsNeverCorrectness) {
  testing::RedisServer server({"--maxmemory-policy", "allkeys-lru"});
  if (!server.available()) GTEST_SKIP() << server.why();
  std::uint64_t used = 0;
  std::istringstream info(server.cli("INFO memory"));
  for (std::string line; std::getline(info, line);)
    if (line.starts_with("used_memory:")) used = std::stoull(line.substr(12));
  ASSERT_GT(used, 0u);
  server.cli("CONFIG SET maxmemory " + std::to_string(used + 200 * 1024));
  const std::string transport = "transport: resp, endpoints: ['" + server.endpoint() + "']";
  const auto a = open_with(transport, "", "fp32", "4MiB");
  const std::vector<std::int32_t> ids = prompt(60 * kPage);  // 60 pages of 16 KiB
  publish(*a, ids);
  const TierStats written = *a->remote_stats();
  EXPECT_EQ(written.written_pages + written.present_pages + written.dropped_writes, 60u);
  EXPECT_LT(std::stoul(server.cli("DBSIZE")), 60u) << "the server evicted nothing";
  const auto b = open_with(transport, "", "fp32", "4MiB");
  const std::uint64_t matched = match_and_compare(*b, *a, ids);
  EXPECT_LT(matched, 60u * kPage);
  EXPECT_EQ(b->remote_stats()->corrupt, 0u);
  EXPECT_EQ(b->remote_stats()->hit_pages, matched / kPage);
}

}  // namespace
}  // namespace kvcache
