// The backend preference list of the default config ([cuda, hip, cpu-tbb]): the first backend
// available here wins, and each one before it is skipped for a reason the loader recorded (on a
// host without a GPU: the CUDA or HIP runtime's own words, or "not installed").
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvcache/cache.hpp"
#include "kvcache/config.hpp"
#include "kvcache/registry.hpp"

namespace kvcache {
namespace {

TEST(BackendChoice, FirstAvailableBackendOfThePreferenceListWins) {
  Config config = default_config({});
  ASSERT_EQ(config.backend_names(), (std::vector<std::string>{"cuda", "hip", "cpu-tbb"}));
  config.cache.capacity_bytes = 64ull << 20;
  const auto registry = Registry::load(config.plugins);
  std::string expected;
  for (const std::string& name : config.backend_names()) {
    const ComponentInfo* info = registry->find(ComponentKind::backend, name);
    if (info != nullptr && info->available) {
      expected = name;
      break;
    }
    if (info != nullptr) {
      EXPECT_FALSE(info->unavailable_reason.empty()) << name;
    }
  }
  ASSERT_FALSE(expected.empty()) << "cpu-tbb is always available";
  const auto cache = Cache::open(config, registry);
  EXPECT_EQ(cache->backend(), expected);
}

// The chosen backend is created with its own options from the list.
TEST(BackendChoice, ChosenBackendGetsItsOptions) {
  Config config = parse_config("backend: [{name: cpu-tbb, threads: 1}]\ncache: {capacity: 64MiB}\n",
                               "test.yaml", {});
  const auto registry = Registry::load(config.plugins);
  const auto cache = Cache::open(config, registry);
  EXPECT_EQ(cache->backend(), "cpu-tbb");
  const SeqId id = cache->add_sequence();
  EXPECT_EQ(cache->sequences(), std::vector<SeqId>{id});

  // Options that cpu-tbb does not take make opening fail, naming the option and the nearest one.
  config.backends[0].options = {{"thread", 2}};
  try {
    Cache::open(config, registry);
    FAIL() << "no Error for an unknown backend option";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::invalid_argument) << e.what();
    const std::string message = e.what();
    EXPECT_NE(message.find("unknown option 'thread'"), std::string::npos) << message;
    EXPECT_NE(message.find("did you mean 'threads'"), std::string::npos) << message;
  }
  config.backends[0].options = {{"threads", -1}};
  try {
    Cache::open(config, registry);
    FAIL() << "no Error for a negative thread count";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("option 'threads'"), std::string::npos) << e.what();
  }
}

// cpu-tbb reports the thread limit it was given as its device's thread count.
TEST(BackendChoice, CpuThreadsOptionLimitsItsThreads) {
  const auto registry = Registry::load(default_config({}).plugins);
  const auto limited = registry->create_backend("cpu-tbb", {{"threads", 1}});
  const std::vector<DeviceInfo> devices = limited->devices();
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_NE(devices[0].name.find("(1 threads, "), std::string::npos) << devices[0].name;
}

}  // namespace
}  // namespace kvcache
