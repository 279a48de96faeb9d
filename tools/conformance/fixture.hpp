// Shared pieces of the store conformance suite: the backends to test (every one the loader
// finds, each skipped with its reason when unavailable or lacking a format), deterministic K/V
// rows, and tensors.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <dlpack/dlpack.h>
#include <gtest/gtest.h>

#include "kvcache/config.hpp"
#include "kvcache/formats.hpp"
#include "kvcache/host_tensor.hpp"
#include "kvcache/registry.hpp"

namespace kvcache::conformance {

// The installed plugins, plus the test-only GPU emulator backend: gpu-common's own code on the
// CPU, so the GPU backends' logic is checked here even without a GPU. KVCACHE_TEST_GPU_EMULATOR
// in the environment replaces its path; empty, it leaves the emulator out (a build tree carried
// to a GPU machine without its test plugins: tools/gpu-check.sh with SKIP_BUILD).
inline const Registry& registry() {
  static const auto r = [] {
    // KVCACHE_PLUGIN_PATH as a config reads it (the default config has no other plugin setting).
    PluginSettings settings = default_config(process_environment()).plugins;
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

// Formats beyond the built-in ones to run every case with: KVCACHE_TEST_FORMATS, a comma-separated
// list of quantizer components found on KVCACHE_PLUGIN_PATH (the out-of-tree test sets both for
// its own format).
inline std::vector<std::string> extra_formats() {
  std::vector<std::string> names;
  const char* list = std::getenv("KVCACHE_TEST_FORMATS");
  std::string_view rest = list != nullptr ? list : "";
  while (!rest.empty()) {
    const std::size_t comma = std::min(rest.find(','), rest.size());
    if (comma > 0) names.emplace_back(rest.substr(0, comma));
    rest.remove_prefix(std::min(comma + 1, rest.size()));
  }
  return names;
}

// The spec with the codecs a store needs for formats that are not built in (as Cache::open).
inline StoreSpec with_codecs(const StoreSpec& spec) {
  return kvcache::with_codecs(spec, registry());
}

// Why `backend` cannot run `spec` here, or empty when it can: not installed, unavailable (with
// the backend's own reason), or a storage format it does not run (as its capabilities say).
inline std::string skip_reason(const std::string& backend, const StoreSpec& spec) {
  const ComponentInfo* info = registry().find(ComponentKind::backend, backend);
  if (info == nullptr) return "backend " + backend + " is not installed";
  if (!info->available) return "backend " + backend + " unavailable: " + info->unavailable_reason;
  for (const std::string& f : {spec.k_format, spec.v_format})
    if (const auto why = format_refusal(*info, f)) return *why;
  return {};
}

// A store from `backend`, or null when skip_reason() says why not.
inline std::unique_ptr<CacheStore> open_store(const std::string& backend, const StoreSpec& spec) {
  if (!skip_reason(backend, spec).empty()) return nullptr;
  return registry().create_backend(backend)->create_store(with_codecs(spec));
}

// A format's reference codec for one slot's codes and meta: the reference code for a built-in
// format, the component's own encode and decode (of slot 0 of a scratch tile) for any other.
class ReferenceCodec {
 public:
  ReferenceCodec(const StoreSpec& spec, bool value)
      : format_(store_format(with_codecs(spec), value)),
        page_size_(spec.page_size),
        dim_(spec.model.head_dim) {}
  const StoreFormat& format() const { return format_; }

  // One row into a slot's codes and meta.
  void encode(std::span<const float> row, std::byte* codes, std::byte* meta) const {
    if (!format_.external()) return reference::encode(format_.spec, row, codes, meta);
    std::vector<std::byte> tile(format_.layout.tile_bytes);
    std::int64_t shape[2] = {1, dim_};
    format_.codec->encode(host_tensor(row.data(), shape, 2), 0, page_size_, tile.data());
    std::copy_n(tile.begin(), format_.layout.slot_code_bytes, codes);
    std::copy_n(tile.begin() + static_cast<std::ptrdiff_t>(format_.layout.code_bytes),
                format_.layout.slot_meta_bytes, meta);
  }
  void decode(const std::byte* codes, const std::byte* meta, std::span<float> row) const {
    if (!format_.external()) return reference::decode(format_.spec, codes, meta, row);
    std::vector<std::byte> tile(format_.layout.tile_bytes);
    std::copy_n(codes, format_.layout.slot_code_bytes, tile.begin());
    std::copy_n(meta, format_.layout.slot_meta_bytes,
                tile.begin() + static_cast<std::ptrdiff_t>(format_.layout.code_bytes));
    std::int64_t shape[2] = {1, dim_};
    DLTensor out = host_tensor(row.data(), shape, 2);
    format_.codec->decode(tile.data(), 0, page_size_, out);
  }

 private:
  StoreFormat format_;
  std::uint32_t page_size_;
  std::int64_t dim_;
};

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
