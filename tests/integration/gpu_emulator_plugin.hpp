// Where the integration tests find the GPU emulator plugin.
#pragma once

#include <cstdlib>
#include <string>

namespace kvcache::testing {

#ifdef KVCACHE_TEST_GPU_EMULATOR
// KVCACHE_TEST_GPU_EMULATOR from the environment where set (empty: none, as in a tree carried to
// a GPU machine by tools/gpu-stage.sh), else where the build put it.
inline std::string gpu_emulator_plugin() {
  const char* from_env = std::getenv("KVCACHE_TEST_GPU_EMULATOR");
  return from_env != nullptr ? from_env : KVCACHE_TEST_GPU_EMULATOR;
}
#endif

}  // namespace kvcache::testing
