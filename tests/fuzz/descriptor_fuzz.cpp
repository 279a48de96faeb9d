// Plugin descriptor validation: the fuzzed-descriptor plugin builds its descriptor from the
// input, and the registry loads it. The plugin is either refused with a reason or listed with
// components that have names; the host never crashes on what a plugin returns.
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kvcache/registry.hpp"

#ifndef KVCACHE_FUZZED_DESCRIPTOR_PLUGIN
#error "KVCACHE_FUZZED_DESCRIPTOR_PLUGIN must name the fuzzed-descriptor plugin file"
#endif

namespace {

using SetBytes = void (*)(const std::uint8_t*, std::size_t);

SetBytes set_bytes() {
  // Loaded once and kept: the registry's own loads of the same file share this copy and its
  // state, so the bytes set here are what its entry reads.
  void* handle = dlopen(KVCACHE_FUZZED_DESCRIPTOR_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::fprintf(stderr, "cannot load %s: %s\n", KVCACHE_FUZZED_DESCRIPTOR_PLUGIN, dlerror());
    std::abort();
  }
  return reinterpret_cast<SetBytes>(dlsym(handle, "kvcache_test_set_descriptor_bytes"));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvcache;
  static const SetBytes set = set_bytes();
  set(data, size);
  PluginSettings settings;
  settings.env_paths = {KVCACHE_FUZZED_DESCRIPTOR_PLUGIN};
  const auto registry = Registry::load(settings);
  const std::string file = KVCACHE_FUZZED_DESCRIPTOR_PLUGIN;
  bool refused = false;
  for (const RejectedPlugin& r : registry->rejected()) {
    if (r.file.string() != file) continue;
    if (r.reason.empty()) std::abort();
    refused = true;
  }
  for (const ComponentInfo& c : registry->components()) {
    if (c.file.string() != file) continue;
    if (refused || c.name.empty() || c.plugin.empty()) std::abort();
    if (!c.available && c.unavailable_reason.empty()) std::abort();
    for (const std::string& format : c.capabilities.formats)
      if (format.empty()) std::abort();
  }
  return 0;
}
