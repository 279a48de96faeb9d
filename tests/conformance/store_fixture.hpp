// Shared pieces of the store conformance suite: the backends to test (every one the loader
// finds, each skipped with its reason when unavailable or lacking a format), deterministic K/V
// rows, and tensors.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <dlpack/dlpack.h>
#include <gtest/gtest.h>

#include "kvcache/host_tensor.hpp"
#include "kvcache/registry.hpp"

namespace kvcache::conformance {

// The installed plugins, plus the test-only GPU emulator backend: gpu-common's own code on the
// CPU, so the GPU backends' logic is checked here even without a GPU. KVCACHE_TEST_GPU_EMULATOR
// in the environment replaces its path; empty, it leaves the emulator out (a build tree carried
// to a GPU machine without its test plugins: tools/gpu-check.sh with SKIP_BUILD).
inline const Registry& registry() {
  static const auto r = [] {
    PluginSettings settings;
    const char* from_env = std::getenv("KVCACHE_TEST_GPU_EMULATOR");
    const std::string emulator = from_env != nullptr ? from_env : KVCACHE_TEST_GPU_EMULATOR;
    if (!emulator.empty()) settings.paths.push_back({emulator, true, {}});
    return Registry::load(settings);
  }();
  return *r;
}

inline std::vector<std::string> backend_names() {
  return registry().names(ComponentKind::backend);
}

// Why `backend` cannot run `spec` here, or empty when it can: not installed, unavailable (with
// the backend's own reason), or a storage format it does not declare.
inline std::string skip_reason(const std::string& backend, const StoreSpec& spec) {
  const ComponentInfo* info = registry().find(ComponentKind::backend, backend);
  if (info == nullptr) return "backend " + backend + " is not installed";
  if (!info->available) return "backend " + backend + " unavailable: " + info->unavailable_reason;
  const std::vector<std::string>& formats = info->capabilities.formats;
  for (const std::string& f : {spec.k_format, spec.v_format})
    if (!formats.empty() && std::find(formats.begin(), formats.end(), f) == formats.end())
      return "backend " + backend + " does not support format " + f;
  return {};
}

// A store from `backend`, or null when skip_reason() says why not.
inline std::unique_ptr<CacheStore> open_store(const std::string& backend, const StoreSpec& spec) {
  if (!skip_reason(backend, spec).empty()) return nullptr;
  return registry().create_backend(backend)->create_store(spec);
}

#define KVCACHE_OPEN_STORE_OR_SKIP(var, backend_name, spec)          \
  auto var = ::kvcache::conformance::open_store(backend_name, spec); \
  if (!var) GTEST_SKIP() << ::kvcache::conformance::skip_reason(backend_name, spec)

// A deterministic row for (token id, position, layer, head, K or V): equal inputs give equal
// K/V, as in a real model, so prefix sharing is checkable.
inline std::vector<float> row_for(std::int32_t token, Position pos, std::uint32_t layer,
                                  std::uint32_t head, bool value, std::uint32_t dim) {
  std::vector<float> row(dim);
  std::uint64_t h = (static_cast<std::uint64_t>(token) * 0x9E3779B97F4A7C15ull) ^
                    (static_cast<std::uint64_t>(pos) << 20) ^ (std::uint64_t{layer} << 8) ^
                    (std::uint64_t{head} << 2) ^ (value ? 1u : 0u);
  for (std::uint32_t i = 0; i < dim; ++i) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    row[i] = static_cast<float>(static_cast<std::int64_t>(h >> 40) - (1 << 23)) / (1 << 21);
  }
  return row;
}

}  // namespace kvcache::conformance
