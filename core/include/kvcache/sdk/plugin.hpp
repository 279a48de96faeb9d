// The plugin SDK (header-only): implement kvcache's C++ interfaces, export them with one macro.
// A component implements AttentionMask, Quantizer, EvictionPolicy, Backend, or
// remote::ByteStore (a transport of the remote tier).
//
//   class MyMask final : public kvcache::AttentionMask {
//    public:
//     explicit MyMask(const kvcache::sdk::Options& options);   // options = config section
//     ...
//   };
//   KVCACHE_PLUGIN("my-plugin", "1.0.0", kvcache::sdk::component<MyMask>("my-mask", "1.0.0"))
//
// The SDK generates the C tables of plugin_abi.h, checks the host's ABI major, and turns every
// exception into a status (kvcache::Error keeps its code; anything else becomes `internal`). A
// component class may define `static kvcache::sdk::Availability availability();` to say that it
// cannot run on this host (no GPU, no driver) while still loading.
#pragma once

#include <string>
#include <type_traits>

#include "kvcache/backend.hpp"
#include "kvcache/eviction.hpp"
#include "kvcache/mask.hpp"
#include "kvcache/plugin_abi.h"
#include "kvcache/quantizer.hpp"
#include "kvcache/remote/byte_store.hpp"
#include "kvcache/sdk/component_spec.hpp"
#include "kvcache/sdk/detail/plugin_data.hpp"
#include "kvcache/sdk/options.hpp"
#include "kvcache/status.hpp"

namespace kvcache::sdk {

// Declares a component implemented by class T (constructible from `const Options&`).
template <class T>
ComponentSpec component(std::string name, std::string version, Capabilities capabilities = {}) {
  constexpr bool known = std::is_base_of_v<AttentionMask, T> || std::is_base_of_v<Quantizer, T> ||
                         std::is_base_of_v<EvictionPolicy, T> || std::is_base_of_v<Backend, T> ||
                         std::is_base_of_v<remote::ByteStore, T>;
  static_assert(known,
                "a component implements AttentionMask, Quantizer, EvictionPolicy, Backend or "
                "remote::ByteStore (a transport)");
  static_assert(std::is_constructible_v<T, const Options&>, "a component is built from Options");
  ComponentSpec spec{
      detail::kind_of<T>(),    std::move(name), std::move(version),
      std::move(capabilities), nullptr,         &decltype(detail::thunks_of<T>())::table};
  if constexpr (requires { T::availability(); }) spec.availability = &detail::availability<T>;
  return spec;
}

}  // namespace kvcache::sdk

// Exports the plugin's entry function; the only symbol a plugin makes visible.
#define KVCACHE_PLUGIN(plugin_name, plugin_version, ...)                                     \
  extern "C" __attribute__((visibility("default"))) int32_t kvcache_plugin_entry(            \
      const kvc_host_info* host, const kvc_plugin_descriptor** out, kvc_error* err) {        \
    return ::kvcache::sdk::detail::entry(host, out, err, [] {                                \
      return ::kvcache::sdk::detail::PluginData(plugin_name, plugin_version, {__VA_ARGS__}); \
    });                                                                                      \
  }
