// The configuration: YAML with one section per component kind (docs/configuration.md).
// A file only states what differs from the embedded default; environment variables override
// single keys. Every error names where it came from (file:line:column or the variable), the key,
// what was expected, and the nearest valid name.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvcache/export.hpp"
#include "kvcache/host_only.hpp"
#include "kvcache/rope.hpp"
#include "kvcache/status.hpp"
#include "kvcache/types.hpp"

namespace kvcache {

// Where a value came from. line/column are 1-based; line == 0 when the origin is not a file
// (an environment variable), then `origin` names it.
struct SourceLocation {
  std::string origin;  // a file path, "<embedded default>", or "environment variable KVCACHE_X"
  int line = 0;
  int column = 0;
};
KVCACHE_API std::string to_string(const SourceLocation& where);

struct Diagnostic {
  enum class Severity { error, warning };
  Severity severity = Severity::error;
  SourceLocation where;
  std::string key;      // dotted path, e.g. "cache.page_size"
  std::string message;  // what was expected and what was found, with "did you mean" when apt
};
// "file:3:14: error: cache.page_size: expected ..."
KVCACHE_API std::string to_string(const Diagnostic& diagnostic);

// Thrown when a config has errors; what() lists every diagnostic, one per line.
class KVCACHE_API ConfigError : public Error {
 public:
  explicit ConfigError(std::vector<Diagnostic> diagnostics);
  const std::vector<Diagnostic>& diagnostics() const { return diagnostics_; }

 private:
  std::vector<Diagnostic> diagnostics_;
};

// A component section: an implementation name plus its options (every other key, as JSON).
struct ComponentChoice {
  std::string name;
  nlohmann::json options = nlohmann::json::object();
  SourceLocation where = {};                                // of the name
  std::map<std::string, SourceLocation> option_where = {};  // of each option's value
};

struct PluginPath {
  std::string path;  // a plugin file (loaded first, forced) or a folder to search
  bool required = false;
  SourceLocation where;
};

struct RequiredPlugin {
  std::string name;  // plugin name, file name or path
  SourceLocation where;
};

struct CacheSettings {
  std::uint32_t page_size = 16;
  std::uint64_t capacity_bytes = 0;
  bool prefix_caching = true;
};

struct PluginSettings {
  std::vector<PluginPath> paths;         // plugins.paths
  std::vector<std::string> env_paths;    // KVCACHE_PLUGIN_PATH, in order
  std::vector<RequiredPlugin> required;  // plugins.required
};

// remote: the remote tier (docs/remote-tier.md). Absent: the prefix cache ends at the process.
struct RemoteSettings {
  ComponentChoice transport;           // "memory" (in-process); its options beside the name
  std::vector<std::string> endpoints;  // the transport's: a memory space's name, host:port, ...
  std::string label = "default";       // namespace.label: in every key (ACLs separate tenants)
  std::string salt_env;                // namespace.salt_env: the variable holding its secret
  std::string model;                   // the model's identity (weights): required
  std::uint64_t queue_bytes = 256ull << 20;  // write.queue: staged writes at most
  std::uint32_t min_pages = 1;               // read.min_pages: ask the store for no fewer
  std::uint32_t batch_pages = 64;            // read.batch_pages: keys per probe and get
  std::uint32_t deadline_ms = 2000;          // read.deadline_ms: one prefix's pull at most
  std::uint32_t breaker_failures = 3;        // breaker.failures: in a row, to open it
  std::uint32_t breaker_open_ms = 10000;     // breaker.open_ms: how long it stays open
  SourceLocation where;                      // of the section
};

// One group of a `layers:` section (docs/configuration.md#layers): layers that attend under
// one mask and store K and V in one pair of formats. What a group does not name is the
// top-level section's, filled in once every source is read.
struct LayerGroup {
  std::string name;
  ComponentChoice mask;
  ComponentChoice k_format;
  ComponentChoice v_format;
  std::vector<std::uint32_t> layers;  // ascending, at least one
  SourceLocation where;               // of the group's entry
};

struct Config {
  std::string origin;  // file path or "<embedded default>"
  ModelShape model;
  // model.rope: how the model rotates its queries and keys; absent: positions are the engine's
  // business (a mask that places queries within the cache needs it).
  std::optional<Rope> rope;
  // Preference list: the first available backend wins and is created with its options. Each
  // entry is a ComponentChoice like every other section's, so the code that checks and creates
  // components treats backends alike; backend_names() serves code that wants the names only.
  std::vector<ComponentChoice> backends;
  SourceLocation backends_where;  // of the list as a whole
  std::vector<std::string> backend_names() const {
    std::vector<std::string> names;
    for (const ComponentChoice& backend : backends) names.push_back(backend.name);
    return names;
  }
  CacheSettings cache;
  ComponentChoice k_format;
  ComponentChoice v_format;
  ComponentChoice mask;
  ComponentChoice eviction;  // name "none": no eviction
  // Two or more groups, which cover every layer once; empty: every layer attends under `mask`
  // and stores in k_format / v_format (a section of one group says the same).
  std::vector<LayerGroup> layer_groups;
  // layers.context: the sequence length that each group's share of cache.capacity is sized for
  // (docs/configuration.md#layers).
  std::uint64_t group_context = 32768;
  // layers.rollback: tokens a windowed group keeps behind its window, so that a truncate of that
  // many finds the window it needs (speculative decoding's rejected drafts).
  std::uint32_t group_rollback = 0;
  PluginSettings plugins;
  std::optional<RemoteSettings> remote;
  std::vector<Diagnostic> warnings;  // e.g. an unknown KVCACHE_* variable
};

// KVCACHE_* variables considered for overrides; tests pass their own.
using Environment = std::map<std::string, std::string>;
KVCACHE_API Environment process_environment();

KVCACHE_API std::string_view default_config_yaml();
// The embedded default with environment overrides applied.
KVCACHE_API Config default_config(const Environment& env);
// Parses `yaml` over the embedded default, then applies `env`. Throws ConfigError.
KVCACHE_API Config parse_config(std::string_view yaml, const std::string& origin,
                                const Environment& env);
// Reads a file (a missing or unreadable file is a ConfigError naming it) and parses it.
KVCACHE_API Config load_config(const std::filesystem::path& file, const Environment& env);
// A config file, a YAML text (one holding a ':' or a line break that names no existing file,
// origin "<yaml text>"), or empty for the embedded default; with `env` applied.
KVCACHE_API Config read_config(std::string_view path_or_yaml, const Environment& env);
// The resolved config as YAML, parseable by parse_config back into an equal Config.
KVCACHE_API std::string to_yaml(const Config& config);

// "2GiB", "512 MiB", "1.5GB", "4096" (bytes). Binary units B KiB MiB GiB TiB, decimal KB MB GB
// TB. Throws Error(invalid_argument) with what was expected and the nearest unit.
KVCACHE_API std::uint64_t parse_size(std::string_view text);
// Inverse for printing: exact binary unit when possible ("2GiB"), else bytes.
KVCACHE_API std::string format_size(std::uint64_t bytes);

}  // namespace kvcache
