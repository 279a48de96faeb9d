// Helpers shared by the loader tests: settings that search the test-plugin folder.
#pragma once

#include <string>

#include "kvcache/registry.hpp"

namespace kvcache::testing {

inline PluginSettings test_plugin_settings() {
  PluginSettings settings;
  settings.env_paths = {KVCACHE_TEST_PLUGIN_DIR};
  return settings;
}

inline std::string test_plugin(const std::string& name) {
  return std::string(KVCACHE_TEST_PLUGIN_DIR) + "/kvcache-" + name + ".so";
}

}  // namespace kvcache::testing
