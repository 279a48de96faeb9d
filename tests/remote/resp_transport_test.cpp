// The resp transport against a real redis-server (started by the test on a free loopback port):
// a batched byte store with put-if-absent, binary values, removal, and failures that are errors
// (the tier takes them as misses), never hangs.
#include <chrono>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvcache/registry.hpp"
#include "redis_server.hpp"

namespace kvcache {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<remote::ByteStore> resp(const std::string& endpoint, nlohmann::json more = {}) {
  static const auto registry = Registry::load(PluginSettings{});
  nlohmann::json options = {{"endpoints", {endpoint}}};
  if (more.is_object()) options.update(more);
  return registry->create_transport("resp", options);
}

TEST(RespTransport, ABatchedByteStoreWithPutIfAbsent) {
  testing::RedisServer server;
  if (!server.available()) GTEST_SKIP() << server.why();
  const auto store = resp(server.endpoint());
  EXPECT_EQ(store->describe(), "resp " + server.endpoint());
  const std::vector<std::string> keys{"kvc1:t:a", "kvc1:t:b", "kvc1:t:c"};
  EXPECT_EQ(store->probe(keys), (std::vector<bool>{false, false, false}));
  remote::Value binary(70000);
  for (std::size_t i = 0; i < binary.size(); ++i) binary[i] = static_cast<std::byte>(i % 251);
  const std::vector<remote::Value> values{binary, remote::Value{std::byte{0}}};
  const std::vector<std::string> two(keys.begin(), keys.begin() + 2);
  EXPECT_EQ(store->put_if_absent(two, values), (std::vector<bool>{true, true}));
  const std::vector<remote::Value> other{remote::Value{std::byte{9}}, remote::Value{}};
  EXPECT_EQ(store->put_if_absent(two, other), (std::vector<bool>{false, false}))
      << "a value once stored stays";
  EXPECT_EQ(store->probe(keys), (std::vector<bool>{true, true, false}));
  const auto got = store->get(keys);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], binary);
  EXPECT_EQ(got[1], values[1]);
  EXPECT_FALSE(got[2].has_value());
  store->remove(two);
  EXPECT_EQ(store->probe(keys), (std::vector<bool>{false, false, false}));
}

TEST(RespTransport, ADeadServerIsAnErrorWithinTheTimeouts) {
  testing::RedisServer server;
  if (!server.available()) GTEST_SKIP() << server.why();
  const auto store = resp(server.endpoint(), {{"connect_timeout_ms", 100}, {"timeout_ms", 200}});
  const std::vector<std::string> keys{"k"};
  EXPECT_EQ(store->probe(keys), std::vector<bool>{false});
  server.kill();
  const auto start = std::chrono::steady_clock::now();
  try {
    store->probe(keys);
    FAIL() << "a dead server answered";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::unavailable) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(server.endpoint()));
  }
  EXPECT_THROW(store->probe(keys), Error) << "and again, reconnecting";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST(RespTransport, OptionsAreChecked) {
  EXPECT_THROW(resp("127.0.0.1:0"), Error);
  EXPECT_THROW(resp("nohost:"), Error);
  try {
    Registry::load(PluginSettings{})->create_transport("resp", {{"endpoints", {"a:1", "b:2"}}});
    FAIL() << "two endpoints taken";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("one endpoint"));
  }
  EXPECT_THROW(resp("127.0.0.1:6379", {{"timeout", 5}}), Error) << "an unknown option";
}

}  // namespace
}  // namespace kvcache
