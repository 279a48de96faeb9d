// The config's reader: one Config overlaid by its sources in order (the embedded default, a
// file, the KVCACHE_* variables). Its YAML sections are read in config.cpp (remote's in
// remote_reader.cpp), the variables in environment.cpp.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/layers_reader.hpp"
#include "config/yaml_reader.hpp"
#include "kvcache/config.hpp"

namespace kvcache::detail {

inline constexpr std::string_view kDefaultOrigin = "<embedded default>";

// Applies sources over one Config in order (default, file, environment): every key a source
// states replaces what came before it.
class Overlay {
 public:
  Overlay(Config& config, std::vector<Diagnostic>& errors) : config_(config), errors_(errors) {}

  void apply_yaml(std::string_view text, const std::string& origin);
  void apply_environment(const Environment& env);
  // Checks that involve several keys, on the final values.
  void check();

 private:
  void section(YamlReader& reader, const std::string& name, const Field& value);
  void model_key(YamlReader& reader, const std::string& key, const Field& value);
  void model_preset(YamlReader& reader, const Field& value);
  void rope_key(YamlReader& reader, Rope& rope, const std::string& key, const Field& value);
  void scaling_key(YamlReader& reader, RopeScaling& scaling, const std::string& key,
                   const Field& value);
  void cache_key(YamlReader& reader, const std::string& key, const Field& value);
  void plugins_key(YamlReader& reader, const std::string& key, const Field& value);
  void remote_key(YamlReader& reader, RemoteSettings& remote, const std::string& key,
                  const Field& value);
  void quantizer_key(YamlReader& reader, const std::string& key, const Field& value);
  bool formats_given_ = false;  // one of format and quantizer, once
  void backend_list(YamlReader& reader, const Field& value);
  static std::optional<PluginPath> plugin_path(YamlReader& reader, const Field& item);

  Config& config_;
  std::vector<Diagnostic>& errors_;
  // Where the head counts were last set, for the multiple-of check once all sources are in.
  SourceLocation q_heads_where_;
  SourceLocation kv_heads_where_;
  bool head_count_unreadable_ = false;
  // The last `layers` section read, laid over the model by check().
  std::optional<LayersSection> layers_;
};

}  // namespace kvcache::detail
