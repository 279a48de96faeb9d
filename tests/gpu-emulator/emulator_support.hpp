// What the emulator's tests share: a registry of the emulator plugin alone, and the emulator's
// counts of what the backend asked of the "device" (emulated_runtime.hpp's emuActivity), found by
// name in the loaded plugin, for tests that count launches, copies and waits.
#pragma once

#include <dlfcn.h>

#include <cstdint>
#include <memory>
#include <stdexcept>

#include "kvcache/registry.hpp"

namespace kvcache::testing {

inline std::shared_ptr<const Registry> emulator_registry(const char* plugin_path) {
  PluginSettings settings;
  settings.paths.push_back({plugin_path, true, {}});
  return Registry::load(settings);
}

struct EmulatorActivity {  // the layout of emuActivity
  std::uint64_t launches, uploads, downloads, synchronizations, events;
  void* launch_stream;
};

inline const EmulatorActivity& emulator_activity(const char* plugin_path) {
  void* plugin = dlopen(plugin_path, RTLD_NOW | RTLD_NOLOAD);
  if (plugin == nullptr) throw std::runtime_error("the emulator plugin is not loaded");
  const void* counts = dlsym(plugin, "kvcache_emulator_activity");
  dlclose(plugin);  // the registry keeps it loaded
  if (counts == nullptr) throw std::runtime_error("kvcache_emulator_activity not found");
  return *static_cast<const EmulatorActivity*>(counts);
}

}  // namespace kvcache::testing
