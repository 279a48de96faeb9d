// The memcached transport against real memcached servers (started by the test on free loopback
// ports): a batched byte store with put-if-absent and binary values; keys spread over the servers
// by consistent hashing; a server killed costs its own keys only, and once it is removed from the
// ring they are written again to the servers left; a call that no server answers is an error.
#include <chrono>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "byte_store_checks.hpp"
#include "kvcache/registry.hpp"
#include "memcached_server.hpp"

namespace kvcache {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<remote::ByteStore> memcached(const std::vector<std::string>& endpoints,
                                             nlohmann::json more = {}) {
  static const auto registry = Registry::load(PluginSettings{});
  nlohmann::json options = {{"endpoints", endpoints}};
  if (more.is_object()) options.update(more);
  return registry->create_transport("memcached", options);
}

TEST(MemcachedTransport, ABatchedByteStoreWithPutIfAbsent) {
  testing::MemcachedServer server;
  if (!server.available()) GTEST_SKIP() << server.why();
  const auto store = memcached({server.endpoint()});
  EXPECT_EQ(store->describe(), "memcached " + server.endpoint());
  testing::expect_a_batched_byte_store(*store);
}

TEST(MemcachedTransport, AKilledServerCostsItsOwnKeysThenLeavesTheRing) {
  testing::MemcachedServer a, b, c;
  if (!a.available()) GTEST_SKIP() << a.why();
  ASSERT_TRUE(b.available() && c.available());
  const auto store = memcached(
      {a.endpoint(), b.endpoint(), c.endpoint()},
      {{"connect_timeout_ms", 100}, {"timeout_ms", 300}, {"failure_limit", 1}, {"retry_s", 60}});
  const std::vector<std::string> keys = testing::keys_named("kvc1:spread:", 60);
  std::vector<remote::Value> values;
  for (int i = 0; i < 60; ++i) values.push_back(remote::Value(100, static_cast<std::byte>(i)));
  EXPECT_EQ(store->put_if_absent(keys, values), std::vector<bool>(60, true));
  const long on_b = b.stat("curr_items");
  EXPECT_GT(a.stat("curr_items"), 0) << "consistent hashing spreads the keys";
  EXPECT_GT(on_b, 0);
  EXPECT_GT(c.stat("curr_items"), 0);

  b.kill();
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::optional<remote::Value>> got = store->get(keys);
  got = store->get(keys);  // after the failure limit, b is out of the ring
  std::size_t held = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!got[i]) continue;
    ++held;
    EXPECT_EQ(*got[i], values[i]) << "never a wrong value";
  }
  EXPECT_EQ(held, 60u - static_cast<std::size_t>(on_b)) << "only b's keys are lost";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));

  // Written again, b's keys land on a and c.
  const std::vector<bool> stored = store->put_if_absent(keys, values);
  EXPECT_EQ(static_cast<long>(std::count(stored.begin(), stored.end(), true)), on_b);
  EXPECT_EQ(a.stat("curr_items") + c.stat("curr_items"), 60);
  got = store->get(keys);
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].has_value()) << keys[i];
    EXPECT_EQ(*got[i], values[i]);
  }
}

TEST(MemcachedTransport, NoServerAnsweringIsAnErrorWithinTheTimeouts) {
  testing::MemcachedServer server;
  if (!server.available()) GTEST_SKIP() << server.why();
  const auto store =
      memcached({server.endpoint()}, {{"connect_timeout_ms", 100}, {"timeout_ms", 200}});
  testing::expect_a_dead_server_is_an_error(*store, server);
}

TEST(MemcachedTransport, OptionsAreChecked) {
  EXPECT_THROW(memcached({}), Error) << "no endpoint";
  EXPECT_THROW(memcached({"127.0.0.1:0"}), Error);
  EXPECT_THROW(memcached({":11211"}), Error);
  EXPECT_THROW(memcached({"127.0.0.1:11211"}, {{"timeout", 5}}), Error) << "an unknown option";
}

}  // namespace
}  // namespace kvcache
