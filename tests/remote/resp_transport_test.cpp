// The resp transport against a real redis-server (started by the test on a free loopback port):
// a batched byte store with put-if-absent, binary values, removal, and failures that are errors
// (the tier takes them as misses), never hangs.
#include <chrono>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "byte_store_checks.hpp"
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
  testing::expect_a_batched_byte_store(*store);
}

TEST(RespTransport, ADeadServerIsAnErrorWithinTheTimeouts) {
  testing::RedisServer server;
  if (!server.available()) GTEST_SKIP() << server.why();
  const auto store = resp(server.endpoint(), {{"connect_timeout_ms", 100}, {"timeout_ms", 200}});
  testing::expect_a_dead_server_is_an_error(*store, server);
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
