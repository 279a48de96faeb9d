// The plugin's descriptor, built once from its component specs, and the entry that hands it to
// the host after checking the host's ABI major.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kvcache/plugin_abi.h"
#include "kvcache/sdk/component_spec.hpp"
#include "kvcache/sdk/detail/backend_thunks.hpp"
#include "kvcache/sdk/detail/eviction_thunks.hpp"
#include "kvcache/sdk/detail/guard.hpp"
#include "kvcache/sdk/detail/mask_thunks.hpp"
#include "kvcache/sdk/detail/quantizer_thunks.hpp"
#include "kvcache/sdk/detail/transport_thunks.hpp"

namespace kvcache::sdk::detail {

// The thunks and kind of a component class, by the interface it implements.
template <class T>
constexpr auto thunks_of() {
  if constexpr (std::is_base_of_v<AttentionMask, T>)
    return MaskThunks<T>{};
  else if constexpr (std::is_base_of_v<Quantizer, T>)
    return QuantizerThunks<T>{};
  else if constexpr (std::is_base_of_v<EvictionPolicy, T>)
    return EvictionThunks<T>{};
  else if constexpr (std::is_base_of_v<Backend, T>)
    return BackendThunks<T>{};
  else if constexpr (std::is_base_of_v<remote::ByteStore, T>)
    return TransportThunks<T>{};
}

template <class T>
constexpr std::uint32_t kind_of() {
  if constexpr (std::is_base_of_v<AttentionMask, T>)
    return KVC_KIND_MASK;
  else if constexpr (std::is_base_of_v<Quantizer, T>)
    return KVC_KIND_QUANTIZER;
  else if constexpr (std::is_base_of_v<EvictionPolicy, T>)
    return KVC_KIND_EVICTION;
  else if constexpr (std::is_base_of_v<remote::ByteStore, T>)
    return KVC_KIND_TRANSPORT;
  else
    return KVC_KIND_BACKEND;
}

// Everything the descriptor points into; built once, never moved.
class PluginData {
 public:
  PluginData(const char* name, const char* version, std::vector<ComponentSpec> specs)
      : name_(name), version_(version), specs_(std::move(specs)) {
    capabilities_.reserve(specs_.size());
    format_names_.reserve(specs_.size());
    numerics_.reserve(specs_.size());
    for (const ComponentSpec& s : specs_) {
      std::vector<const char*>& formats = format_names_.emplace_back();
      for (const std::string& f : s.capabilities.formats) formats.push_back(f.c_str());
      const Capabilities& c = s.capabilities;
      const std::string& numerics = numerics_.emplace_back(c.numerics.dump());
      capabilities_.push_back(
          {sizeof(kvc_capabilities), static_cast<uint32_t>(formats.size()), formats.data(),
           static_cast<uint32_t>(c.head_dims.size()), c.head_dims.data(),
           static_cast<uint32_t>(c.page_sizes.size()), c.page_sizes.data(),
           c.device_kind.empty() ? nullptr : c.device_kind.c_str(), c.foreign_formats ? 1u : 0u, 0,
           numerics.c_str(), c.query_rotation ? 1u : 0u, c.engine_streams ? 1u : 0u});
      components_.push_back({sizeof(kvc_component), s.kind, s.name.c_str(), s.version.c_str(),
                             &capabilities_.back(), s.availability, s.table});
    }
    descriptor_ = {sizeof(kvc_plugin_descriptor),
                   KVC_ABI_MAJOR,
                   KVC_ABI_MINOR,
                   name_.c_str(),
                   version_.c_str(),
                   static_cast<uint32_t>(components_.size()),
                   components_.data()};
  }
  PluginData(const PluginData&) = delete;
  PluginData& operator=(const PluginData&) = delete;
  const kvc_plugin_descriptor* descriptor() const { return &descriptor_; }

 private:
  std::string name_;
  std::string version_;
  std::vector<ComponentSpec> specs_;
  std::vector<std::vector<const char*>> format_names_;
  std::vector<std::string> numerics_;
  std::vector<kvc_capabilities> capabilities_;
  std::vector<kvc_component> components_;
  kvc_plugin_descriptor descriptor_{};
};

template <class Make>
int32_t entry(const kvc_host_info* host, const kvc_plugin_descriptor** out, kvc_error* err,
              Make make) noexcept {
  return guard(err, [&] {
    if (host == nullptr || host->abi_major != KVC_ABI_MAJOR)
      throw Error(
          Code::unsupported,
          "plugin needs kvcache ABI " + std::to_string(KVC_ABI_MAJOR) + ".x, host offers " +
              (host ? std::to_string(host->abi_major) + "." + std::to_string(host->abi_minor)
                    : std::string("nothing")));
    static const PluginData data = make();
    *out = data.descriptor();
  });
}

}  // namespace kvcache::sdk::detail
