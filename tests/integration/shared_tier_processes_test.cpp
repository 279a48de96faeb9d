// Two processes share prefix pages through a real server: the kvcache tool's serving simulation
// (`kvcache bench`), run twice on the same requests with the same remote tier: a Redis, a
// memcached, a Redis Cluster. The second process
// pulls what the first wrote, each page checked on arrival (its identity and payload digest) and
// none found corrupt, and reuses more of its prompts for it.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "memcached_server.hpp"
#include "redis_cluster.hpp"
#include "redis_server.hpp"

namespace kvcache {
namespace {

// The tool's JSON for `kvcache --config <config> bench --requests 16 --json`.
nlohmann::json simulate(const std::filesystem::path& config) {
  const std::string command = std::string(KVCACHE_TEST_TOOL) + " --config " + config.string() +
                              " bench --requests 16 --json 2>/dev/null";
  std::string out;
  if (FILE* p = popen(command.c_str(), "r")) {
    char buffer[4096];
    for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, p)) > 0;) out.append(buffer, n);
    pclose(p);
  }
  return nlohmann::json::parse(out, nullptr, false);
}

class SharedTierProcesses : public ::testing::TestWithParam<std::string> {};

TEST_P(SharedTierProcesses, ASecondProcessPullsWhatTheFirstWrote) {
  std::unique_ptr<testing::LocalServer> server;
  std::unique_ptr<testing::RedisCluster> cluster;
  std::string transport = GetParam();
  if (GetParam() == "resp") {
    server = std::make_unique<testing::RedisServer>();
  } else if (GetParam() == "memcached") {
    server = std::make_unique<testing::MemcachedServer>();
  } else {
    cluster = std::make_unique<testing::RedisCluster>();
    if (!cluster->available()) GTEST_SKIP() << cluster->why();
    transport = "{name: resp, cluster: true}";
  }
  if (server && !server->available()) GTEST_SKIP() << server->why();
  const testing::LocalServer& seed = server ? *server : *cluster->nodes()[0];
  const std::filesystem::path config =
      std::filesystem::temp_directory_path() /
      ("kvcache-processes-" + GetParam() + "-" + std::to_string(seed.port()) + ".yaml");
  std::ofstream(config) << "remote: {transport: " << transport << ", endpoints: ['"
                        << seed.endpoint() << "'], model: bench@1}\n";

  const nlohmann::json first = simulate(config), second = simulate(config);
  std::filesystem::remove(config);
  ASSERT_FALSE(first.is_discarded() || second.is_discarded()) << "the tool printed no JSON";
  const nlohmann::json& wrote = first["remote"];
  const nlohmann::json& read = second["remote"];
  EXPECT_GT(wrote["pages_written"].get<int>(), 0);
  EXPECT_EQ(wrote["pages_pulled"].get<int>(), 0) << "nothing was there before";
  EXPECT_GT(read["pages_pulled"].get<int>(), 0);
  EXPECT_GT(read["prefill_tokens_pulled"].get<int>(), 0);
  EXPECT_EQ(read["corrupt"].get<int>(), 0);
  EXPECT_EQ(read["failures"].get<int>(), 0);
  EXPECT_EQ(first["finished"], second["finished"]) << "the same requests, served alike";
  EXPECT_GT(second["prefix_hit_rate"].get<double>(), first["prefix_hit_rate"].get<double>());
}

INSTANTIATE_TEST_SUITE_P(Transports, SharedTierProcesses,
                         ::testing::Values("resp", "memcached", "resp_cluster"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kvcache
