// The registry: every component that the loader found, where it came from, what it can do and
// whether it can run here; every plugin file that was refused and why; and the factories that
// turn a component name plus options into a live object (which keeps its library loaded).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvcache/backend.hpp"
#include "kvcache/capabilities.hpp"
#include "kvcache/config.hpp"
#include "kvcache/eviction.hpp"
#include "kvcache/export.hpp"
#include "kvcache/host_only.hpp"
#include "kvcache/mask.hpp"
#include "kvcache/quantizer.hpp"
#include "kvcache/remote/byte_store.hpp"
#include "kvcache/types.hpp"

namespace kvcache {

struct ComponentInfo {
  ComponentKind kind = ComponentKind::backend;
  std::string name;
  std::string version;
  std::string plugin;  // the plugin's own name
  std::string plugin_version;
  std::filesystem::path file;  // the shared library it lives in
  Capabilities capabilities;
  bool available = true;
  std::string unavailable_reason;
  std::string shadowed_by;  // non-empty: an earlier plugin provides the same kind and name
};

struct RejectedPlugin {
  std::filesystem::path file;
  std::string reason;
};

// Where the loader looks, in this order (docs/configuration.md, "Plugin discovery").
struct SearchPlan {
  std::vector<std::filesystem::path> forced_files;  // config plugins.paths that are files
  std::vector<std::filesystem::path> env_entries;   // KVCACHE_PLUGIN_PATH: files or folders
  std::vector<std::filesystem::path> config_dirs;   // config plugins.paths that are folders
  std::filesystem::path install_dir;                // the install plugin folder
  std::filesystem::path library_dir;                // the folder of libkvcache
};

class KVCACHE_API Registry {
 public:
  // Discovers and loads plugins as the settings say. Bad plugins are skipped with their reason;
  // throws ConfigError only when a plugin marked required could not be loaded.
  static std::shared_ptr<const Registry> load(const PluginSettings& settings);
  // The plan load() follows for these settings (shown by `kvcache plugins`).
  static SearchPlan search_plan(const PluginSettings& settings);

  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  const std::vector<ComponentInfo>& components() const;
  const std::vector<RejectedPlugin>& rejected() const;
  // The usable (not shadowed) component of that kind and name, or nullptr.
  const ComponentInfo* find(ComponentKind kind, std::string_view name) const;
  std::vector<std::string> names(ComponentKind kind) const;

  // Factories. Unknown name: Error(not_found) with the nearest name; unavailable component:
  // Error(unavailable) with its reason; bad options: the plugin's Error(invalid_argument).
  std::unique_ptr<AttentionMask> create_mask(std::string_view name,
                                             const nlohmann::json& options = {}) const;
  std::unique_ptr<Quantizer> create_quantizer(std::string_view name,
                                              const nlohmann::json& options = {}) const;
  std::unique_ptr<EvictionPolicy> create_eviction(std::string_view name,
                                                  const nlohmann::json& options = {}) const;
  std::unique_ptr<Backend> create_backend(std::string_view name,
                                          const nlohmann::json& options = {}) const;
  // A transport of the remote tier (docs/remote-tier.md): `options` holds its "endpoints".
  std::unique_ptr<remote::ByteStore> create_transport(std::string_view name,
                                                      const nlohmann::json& options = {}) const;

  struct Impl;

 private:
  explicit Registry(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Throws Error(not_found) with the nearest installed name unless `format` is a built-in format
// or a quantizer component of the registry.
KVCACHE_API void check_format_name(const Registry& registry, std::string_view format);

// The spec with the codec of each format that is not built in, made from its quantizer
// component (Error with the nearest name when there is none): what a store needs to run such a
// format, and what page_cost needs to size it.
KVCACHE_API StoreSpec with_codecs(StoreSpec spec, const Registry& registry);

// Why `backend` cannot run storage format `format` ("backend 'cuda' runs only its own formats
// (fp32, ...), not 'nf4'"), or nullopt when it can: a backend runs the formats its capabilities
// list and, when it declares foreign_formats, any other.
KVCACHE_API std::optional<std::string> format_refusal(const ComponentInfo& backend,
                                                      const std::string& format);

// The config's formats that `backend` cannot run, as errors at each format's place (key
// format.k or format.v): what Cache::open refuses and kvcache config check reports.
KVCACHE_API std::vector<Diagnostic> format_refusals(const Config& config,
                                                    const ComponentInfo& backend);

// Checks the component names and options of a config against what is installed: unknown names
// get the nearest installed one, options are validated by creating each component once.
// Backends missing from the preference list are warnings (a config is shared across hosts).
KVCACHE_API std::vector<Diagnostic> check_components(const Config& config,
                                                     const Registry& registry);

// Whether the config's eviction policy (made from it) can run with its K and V formats, at the
// eviction's place in the config: an error for a policy that drops tokens one by one against a
// format whose scales span groups of tokens (per channel, as kivi-k keys), a warning for a policy
// that does not declare whether it drops tokens there, nothing otherwise. Throws what creating
// the quantizers throws.
KVCACHE_API std::optional<Diagnostic> token_drop_check(const Config& config,
                                                       const Registry& registry,
                                                       const EvictionPolicy& policy);

// Whether a mask that places queries within the cache (describe().positions_in_cache) can run:
// an error at the mask's place when the config has no model.rope, its rope does not fit head_dim,
// or `backend` does not turn queries per range (capabilities' query_rotation); nothing otherwise.
KVCACHE_API std::optional<Diagnostic> position_check(const Config& config,
                                                     const ComponentInfo& backend,
                                                     const AttentionMask& mask);

}  // namespace kvcache
