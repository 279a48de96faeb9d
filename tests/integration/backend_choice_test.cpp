// The backend preference list of the default config ([cuda, hip, cpu-tbb]): the first backend
// available here wins, and each one before it is skipped for a reason the loader recorded (on a
// host without a GPU: the CUDA or HIP runtime's own words, or "not installed").
#include <gtest/gtest.h>

#include "kvcache/cache.hpp"
#include "kvcache/config.hpp"
#include "kvcache/registry.hpp"

namespace kvcache {
namespace {

TEST(BackendChoice, FirstAvailableBackendOfThePreferenceListWins) {
  Config config = default_config({});
  ASSERT_EQ(config.backends, (std::vector<std::string>{"cuda", "hip", "cpu-tbb"}));
  config.cache.capacity_bytes = 64ull << 20;
  const auto registry = Registry::load(config.plugins);
  std::string expected;
  for (const std::string& name : config.backends) {
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

}  // namespace
}  // namespace kvcache
