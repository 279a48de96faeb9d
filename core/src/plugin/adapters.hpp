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

// rotates_queries: the backend declares query_rotation; requests with rotations are refused
// otherwise (an older backend would ignore them and attend at the wrong positions).
std::unique_ptr<Attention> make_attention(std::shared_ptr<const PluginLibrary> library,
                                          const kvc_attention_table* table, void* attention,
                                          const std::string& who, bool rotates_queries);

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
