// The registry of the integration tests: the in-tree plugins, the test-faulty components
// (tests/plugins/faulty_backend.cpp) and, where it is built, the GPU emulator. Loaded once.
#pragma once

#include <memory>
#include <string>

#include "gpu_emulator_plugin.hpp"
#include "kvcache/registry.hpp"

namespace kvcache::testing {

inline std::shared_ptr<const Registry> test_registry() {
  static const auto registry = [] {
    PluginSettings settings;
    settings.paths.push_back({KVCACHE_TEST_FAULTY_PLUGIN, true, {}});
#ifdef KVCACHE_TEST_GPU_EMULATOR
    if (const std::string emulator = gpu_emulator_plugin(); !emulator.empty())
      settings.paths.push_back({emulator, true, {}});
#endif
    return Registry::load(settings);
  }();
  return registry;
}

}  // namespace kvcache::testing
