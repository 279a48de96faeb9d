// Host adapters: a plugin's C table wrapped back into kvcache's C++ interfaces.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kvcache/attention.hpp"
#include "kvcache/backend.hpp"
#include "kvcache/cache_store.hpp"
#include "kvcache/eviction.hpp"
#include "kvcache/mask.hpp"
#include "kvcache/quantizer.hpp"
#include "kvcache/remote/byte_store.hpp"
#include "plugin/host_call.hpp"
#include "plugin/plugin_library.hpp"

namespace kvcache::plugin {

// Each creates the plugin object with `options_json` and adapts it; throws Error on failure.
// `who` names the component in every error ("mask 'causal' (kvcache-masks.so)").
std::unique_ptr<AttentionMask> make_mask(std::shared_ptr<const PluginLibrary> library,
                                         const kvc_component& component,
                                         const std::string& options_json, const std::string& who);
std::unique_ptr<Quantizer> make_quantizer(std::shared_ptr<const PluginLibrary> library,
                                          const kvc_component& component,
                                          const std::string& options_json, const std::string& who);
std::unique_ptr<EvictionPolicy> make_eviction(std::shared_ptr<const PluginLibrary> library,
                                              const kvc_component& component,
                                              const std::string& options_json,
                                              const std::string& who);
std::unique_ptr<Backend> make_backend(std::shared_ptr<const PluginLibrary> library,
                                      const kvc_component& component,
                                      const std::string& options_json, const std::string& who);
std::unique_ptr<remote::ByteStore> make_transport(std::shared_ptr<const PluginLibrary> library,
                                                  const kvc_component& component,
                                                  const std::string& options_json,
                                                  const std::string& who);

// Adapts a store that a backend created (the backend's library stays loaded while it lives);
// `codecs` are the formats' codecs lent to it, kept until it is destroyed.
std::unique_ptr<CacheStore> make_store(std::shared_ptr<const PluginLibrary> library,
                                       const kvc_store_table* table, void* store,
                                       const std::string& who,
                                       std::vector<std::shared_ptr<const Quantizer>> codecs);

// The raw handle of a store made by `library`'s backend; Error(invalid_argument) otherwise.
void* store_handle(CacheStore& store, const PluginLibrary& library);

// What a backend's capabilities declare for its attention. Requests that need more are refused:
// an older backend would ignore query rotations and attend at the wrong positions, or ignore an
// engine stream and race with the engine's work.
struct AttentionTraits {
  bool rotates_queries = false;  // query_rotation (ABI 1.6)
  bool engine_streams = false;   // engine_streams (ABI 1.10)
};
std::unique_ptr<Attention> make_attention(std::shared_ptr<const PluginLibrary> library,
                                          const kvc_attention_table* table, void* attention,
                                          const std::string& who, AttentionTraits traits);

// Creates the raw plugin object of a table with the common instance header.
template <class Table>
std::unique_ptr<PluginInstance<Table>> create_instance(std::shared_ptr<const PluginLibrary> library,
                                                       const kvc_component& component,
                                                       const std::string& options_json,
                                                       const std::string& who) {
  const auto* table = static_cast<const Table*>(component.table);
  void* handle = nullptr;
  host_call(who, [&](kvc_error* err) { return table->create(options_json.c_str(), &handle, err); });
  if (handle == nullptr) throw Error(Code::internal, who + ": create returned no object");
  return adopt(std::move(library), table, handle, who);
}

}  // namespace kvcache::plugin
