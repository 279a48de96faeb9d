// The KVCACHE_* variables: each sets one key of the config, after every file.
#include <unistd.h>  // environ

#include <algorithm>
#include <array>

#include "config/overlay.hpp"
#include "config/text_check.hpp"
#include "kvcache/nearest_name.hpp"

namespace kvcache {
namespace {

constexpr std::string_view kEnvPrefix = "KVCACHE_";
constexpr std::string_view kBackendVariable = "KVCACHE_BACKEND";
constexpr std::string_view kPluginPathVariable = "KVCACHE_PLUGIN_PATH";
// Read by the command-line tool, not by the config.
constexpr std::string_view kLogLevelVariable = "KVCACHE_LOG_LEVEL";
// Read by the cpu-tbb backend (which kernels it may use), not by the config.
constexpr std::array<std::string_view, 3> kCpuVariables = {"KVCACHE_CPU_ISA", "KVCACHE_CPU_NO_VNNI",
                                                           "KVCACHE_CPU_NO_VBMI"};

// A variable that sets one key; `key` is empty for a component section (a name, no options).
struct EnvKey {
  std::string_view variable;
  std::string_view section;
  std::string_view key;
};
constexpr std::array<EnvKey, 13> kEnvKeys = {{
    {"KVCACHE_MODEL_LAYERS", "model", "layers"},
    {"KVCACHE_MODEL_Q_HEADS", "model", "q_heads"},
    {"KVCACHE_MODEL_KV_HEADS", "model", "kv_heads"},
    {"KVCACHE_MODEL_HEAD_DIM", "model", "head_dim"},
    {"KVCACHE_CACHE_PAGE_SIZE", "cache", "page_size"},
    {"KVCACHE_CACHE_CAPACITY", "cache", "capacity"},
    {"KVCACHE_CACHE_PREFIX_CACHING", "cache", "prefix_caching"},
    {"KVCACHE_FORMAT_K", "format", "k"},
    {"KVCACHE_FORMAT_V", "format", "v"},
    {"KVCACHE_QUANTIZER_K", "format", "k"},  // the section's old name
    {"KVCACHE_QUANTIZER_V", "format", "v"},
    {"KVCACHE_MASK", "mask", ""},
    {"KVCACHE_EVICTION", "eviction", ""},
}};

std::vector<std::string> split(std::string_view text, char separator) {
  std::vector<std::string> parts;
  while (true) {
    const std::size_t end = text.find(separator);
    parts.emplace_back(text.substr(0, end));
    if (end == std::string_view::npos) return parts;
    text.remove_prefix(end + 1);
  }
}

std::string trim(std::string_view text) {
  const auto space = [](char c) { return c == ' ' || c == '\t'; };
  while (!text.empty() && space(text.front())) text.remove_prefix(1);
  while (!text.empty() && space(text.back())) text.remove_suffix(1);
  return std::string(text);
}

}  // namespace

namespace detail {

void Overlay::apply_environment(const Environment& env) {
  // Fields from the environment carry their own location; the origin here is never shown.
  YamlReader reader("environment", errors_);
  for (const auto& [variable, value] : env) {
    if (!variable.starts_with(kEnvPrefix) || variable == kLogLevelVariable ||
        std::find(kCpuVariables.begin(), kCpuVariables.end(), variable) != kCpuVariables.end())
      continue;
    const SourceLocation where{"environment variable " + variable, 0, 0};
    if (text_fault(value)) {
      reader.error(where, "", "the value is not UTF-8 text without control characters");
      continue;
    }
    // Names only, without options, as for the other component variables.
    if (variable == kBackendVariable) {
      std::vector<ComponentChoice> backends;
      for (const std::string& part : split(value, ',')) {
        if (std::string name = trim(part); !name.empty())
          backends.push_back({.name = std::move(name), .where = where});
      }
      if (backends.empty()) {
        reader.error(where, "backend",
                     "expected a comma-separated list of backend names, got '" + value + "'");
      } else {
        config_.backends = std::move(backends);
        config_.backends_where = where;
      }
      continue;
    }
    if (variable == kPluginPathVariable) {
      config_.plugins.env_paths.clear();
      for (std::string& part : split(value, ':')) {
        if (!part.empty()) config_.plugins.env_paths.push_back(std::move(part));
      }
      continue;
    }
    const auto known = std::find_if(kEnvKeys.begin(), kEnvKeys.end(),
                                    [&](const EnvKey& k) { return k.variable == variable; });
    if (known == kEnvKeys.end()) {
      // Compare without the shared prefix, which would make every name look near.
      std::vector<std::string_view> names = {kBackendVariable, kPluginPathVariable,
                                             kLogLevelVariable};
      names.insert(names.end(), kCpuVariables.begin(), kCpuVariables.end());
      for (const EnvKey& k : kEnvKeys) names.push_back(k.variable);
      for (std::string_view& name : names) name.remove_prefix(kEnvPrefix.size());
      const auto nearest =
          nearest_name(std::string_view(variable).substr(kEnvPrefix.size()), names);
      config_.warnings.push_back(
          {Diagnostic::Severity::warning, where, "",
           "unknown variable " + variable +
               (nearest ? " (did you mean " + std::string(kEnvPrefix) + *nearest + "?)" : "")});
      continue;
    }
    const std::string section(known->section);
    const std::string key(known->key);
    const Field field{YAML::Node(value), where, key.empty() ? section : section + "." + key};
    if (section == "model") model_key(reader, key, field);
    if (section == "cache") cache_key(reader, key, field);
    if (section == "format") quantizer_key(reader, key, field);
    if (section == "mask") reader.component(field, config_.mask);
    if (section == "eviction") reader.component(field, config_.eviction);
  }
}

}  // namespace detail

Environment process_environment() {
  Environment env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const std::size_t equals = text.find('=');
    if (!text.starts_with(kEnvPrefix) || equals == std::string_view::npos) continue;
    env.emplace(text.substr(0, equals), text.substr(equals + 1));
  }
  return env;
}

}  // namespace kvcache
