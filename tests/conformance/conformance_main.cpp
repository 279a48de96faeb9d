// ctest's conformance binaries: the cases of tools/conformance on every plugin found beside
// libkvcache and on KVCACHE_PLUGIN_PATH, plus the test-only GPU emulator backend (gpu-common's
// code on the CPU, so the GPU backends' logic is checked without a GPU). KVCACHE_TEST_GPU_EMULATOR
// in the environment replaces the emulator's path; empty, it leaves the emulator out (a build
// tree carried to a GPU machine without its test plugins: tools/gpu-check.sh with SKIP_BUILD).
// KVCACHE_TEST_FORMATS, a comma-separated list of quantizer components, adds formats from outside
// to every case.
#include <cstdlib>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "setup.hpp"

int main(int argc, char** argv) {
  using namespace kvcache;
  conformance::Setup setup;
  setup.plugins = default_config(process_environment()).plugins;
  const char* from_env = std::getenv("KVCACHE_TEST_GPU_EMULATOR");
  const std::string emulator = from_env != nullptr ? from_env : KVCACHE_TEST_GPU_EMULATOR;
  if (!emulator.empty()) setup.plugins.paths.push_back({emulator, true, {}});
  const char* formats = std::getenv("KVCACHE_TEST_FORMATS");
  for (std::string_view rest = formats != nullptr ? formats : ""; !rest.empty();) {
    const std::size_t comma = std::min(rest.find(','), rest.size());
    if (comma > 0) setup.extra_formats.emplace_back(rest.substr(0, comma));
    rest.remove_prefix(std::min(comma + 1, rest.size()));
  }
  conformance::configure(setup);  // before InitGoogleTest generates the cases
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
