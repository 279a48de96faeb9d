// Two processes share prefix pages through a real server (a Redis, a memcached, a Redis Cluster):
// - the kvcache tool's serving simulation (`kvcache bench`), run twice on the same requests: the
//   second process pulls what the first wrote, none found corrupt, and reuses more of its prompts;
// - this test run again as a peer (`--peer CONFIG write|read PAGES`), in every format: a writer
//   publishes a prompt, a reader pulls it, and each prints a digest of the prompt's tiles (every
//   page, layer, head, K and V): the reader's equal the writer's.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "memcached_server.hpp"
#include "redis_cluster.hpp"
#include "redis_server.hpp"
#include "tier_prompts.hpp"

namespace kvcache {
namespace {

// The last line `command` prints, read as JSON (discarded if it is not): log lines may come first.
nlohmann::json json_of(const std::string& command) {
  std::string out;
  if (FILE* p = popen((command + " 2>/dev/null").c_str(), "r")) {
    char buffer[4096];
    for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, p)) > 0;) out.append(buffer, n);
    pclose(p);
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return nlohmann::json::parse(out.substr(out.find_last_of('\n') + 1), nullptr, false);
}

// The tool's JSON for `kvcache --config <config> bench --requests 16 --json`.
nlohmann::json simulate(const std::filesystem::path& config) {
  return json_of(std::string(KVCACHE_TEST_TOOL) + " --config " + config.string() +
                 " bench --requests 16 --json");
}

// FNV-1a over the tiles of sequence `id`'s first `pages` pages, in page, layer, head, K/V order.
std::string tiles_digest(const Cache& cache, SeqId id, std::size_t pages) {
  std::uint64_t h = 14695981039346656037ull;
  const PageTable table = cache.store().page_table(std::vector<SeqId>{id});
  for (std::size_t i = 0; i < pages && i < table.indices.size(); ++i)
    for (std::uint32_t layer = 0; layer < testing::kLayers; ++layer)
      for (std::uint32_t head = 0; head < testing::kKv; ++head)
        for (const bool value : {false, true})
          for (const std::byte b : cache.store().read_tile(
                   static_cast<std::uint32_t>(table.indices[i]), layer, head, value))
            h = (h ^ static_cast<std::uint64_t>(b)) * 1099511628211ull;
  return std::to_string(h);
}

// The peer: writes and publishes (write) or matches (read) a prompt of `pages` pages, and prints
// the tokens it reused, the tier's counters and the digest of the prompt's tiles.
int peer(const std::string& config, const std::string& role, std::size_t pages) {
  const auto cache = Cache::open(config);
  const std::vector<std::int32_t> ids = testing::prompt(pages * testing::kPage);
  const SeqId id = cache->add_sequence();
  nlohmann::json out;
  if (role == "write") {
    testing::write(*cache, id, ids, 0);
    cache->publish_prefix(id, ids);
    out["flushed"] = cache->flush_remote(std::chrono::seconds(10));
  } else {
    out["reused"] = cache->match_prefix(id, ids);
  }
  const remote::TierStats stats = *cache->remote_stats();
  out["hit_pages"] = stats.hit_pages;
  out["written_pages"] = stats.written_pages;
  out["corrupt"] = stats.corrupt;
  out["tiles"] = tiles_digest(*cache, id, pages);
  std::cout << out.dump() << std::endl;
  return 0;
}

// A server of the transport named by the parameter, and the remote section's start for it.
class RemoteTierProcesses : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "resp") {
      server_ = std::make_unique<testing::RedisServer>();
    } else if (GetParam() == "memcached") {
      server_ = std::make_unique<testing::MemcachedServer>();
    } else {
      cluster_ = std::make_unique<testing::RedisCluster>();
      if (!cluster_->available()) GTEST_SKIP() << cluster_->why();
      transport_ = "{name: resp, cluster: true}";
    }
    if (server_ && !server_->available()) GTEST_SKIP() << server_->why();
  }
  const testing::LocalServer& seed() const { return server_ ? *server_ : *cluster_->nodes()[0]; }
  std::string remote() const {
    return "transport: " + transport_ + ", endpoints: ['" + seed().endpoint() + "'], model: ";
  }
  // A config file of `text`, removed with the test.
  std::filesystem::path config(const std::string& name, const std::string& text) {
    const std::filesystem::path path =
        std::filesystem::temp_directory_path() /
        ("kvcache-processes-" + name + "-" + std::to_string(seed().port()) + ".yaml");
    std::ofstream(path) << text;
    files_.push_back(path);
    return path;
  }
  void TearDown() override {
    for (const auto& f : files_) std::filesystem::remove(f);
  }

 private:
  std::unique_ptr<testing::LocalServer> server_;
  std::unique_ptr<testing::RedisCluster> cluster_;
  std::string transport_ = GetParam();
  std::vector<std::filesystem::path> files_;
};

TEST_P(RemoteTierProcesses, ASecondProcessPullsWhatTheFirstWrote) {
  const std::filesystem::path config = this->config("bench", "remote: {" + remote() + "bench@1}\n");
  const nlohmann::json first = simulate(config), second = simulate(config);
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

TEST_P(RemoteTierProcesses, APeerReadsTheTilesAnotherWroteByteForByteInEveryFormat) {
  constexpr std::size_t kPages = 5;
  for (const std::string format :
       {"fp32", "fp16", "bf16", "fp8-e4m3", "int8-per-token", "int4-group",
        "{k: {name: kivi-k, group: 8}, v: int8-per-token}"}) {
    SCOPED_TRACE(format);
    // A model identity of the format's own: each format's pages under keys of their own.
    const std::string label = "peer" + std::to_string(std::hash<std::string>{}(format) % 100000);
    const std::filesystem::path config =
        this->config(label, testing::tiny_config(remote() + label + "@1", format));
    const std::string peer = "/proc/self/exe";
    const auto run = [&](const std::string& role) {
      return json_of(std::filesystem::read_symlink(peer).string() + " --peer " + config.string() +
                     " " + role + " " + std::to_string(kPages));
    };
    const nlohmann::json wrote = run("write"), read = run("read");
    ASSERT_FALSE(wrote.is_discarded() || read.is_discarded()) << "a peer printed no JSON";
    EXPECT_TRUE(wrote["flushed"].get<bool>());
    EXPECT_EQ(wrote["written_pages"].get<std::uint64_t>(), kPages);
    EXPECT_EQ(read["reused"].get<std::uint64_t>(), kPages * testing::kPage);
    EXPECT_EQ(read["hit_pages"].get<std::uint64_t>(), kPages) << "the pages came from the tier";
    EXPECT_EQ(read["corrupt"].get<std::uint64_t>(), 0u);
    EXPECT_EQ(read["tiles"], wrote["tiles"]) << "the reader's tiles differ from the writer's";
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, RemoteTierProcesses,
                         ::testing::Values("resp", "memcached", "resp_cluster"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kvcache

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--peer")
    return kvcache::peer(argv[2], argv[3], std::stoul(argv[4]));
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
