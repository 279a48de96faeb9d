// The config: the embedded default, overlaid by a file, overlaid by KVCACHE_* variables; the
// YAML sections' readers (remote's in remote_reader.cpp, the variables in environment.cpp,
// the writer in config_writer.cpp).
#include "kvcache/config.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

#include <yaml-cpp/yaml.h>

#include "config/overlay.hpp"
#include "kvcache/model_presets.hpp"
#include "kvcache/nearest_name.hpp"

namespace kvcache {
namespace detail {
extern const char* const default_config_text;
}  // namespace detail

namespace detail {

constexpr std::uint32_t kMaxPageSize = 1024;

void Overlay::apply_yaml(std::string_view text, const std::string& origin) {
  YamlReader reader(origin, errors_);
  const std::optional<YAML::Node> document = reader.load(text);
  if (!document) return;
  // An empty file states no differences from the default.
  if (document->IsNull()) return;
  formats_given_ = false;  // per document: each may restate what the one before it said
  reader.for_each_entry(
      reader.root(*document),
      {"model", "backend", "cache", "format", "quantizer", "mask", "eviction", "layers", "plugins",
       "remote"},
      [&](const std::string& name, const Field& value) { section(reader, name, value); });
}

void Overlay::section(YamlReader& reader, const std::string& name, const Field& value) {
  const auto visit = [&](auto member) {
    return [&, member](const std::string& key, const Field& field) {
      (this->*member)(reader, key, field);
    };
  };
  if (name == "model") {
    // A preset first, wherever it stands in the mapping: the keys beside it override it.
    if (value.node.IsMap())
      for (const auto& entry : value.node)
        if (entry.first.IsScalar() && entry.first.Scalar() == "preset")
          model_preset(reader, {entry.second, reader.where(entry.second), "model.preset"});
    reader.for_each_entry(value, {"preset", "layers", "q_heads", "kv_heads", "head_dim", "rope"},
                          visit(&Overlay::model_key));
  } else if (name == "backend") {
    backend_list(reader, value);
  } else if (name == "cache") {
    reader.for_each_entry(value, {"page_size", "capacity", "prefix_caching"},
                          visit(&Overlay::cache_key));
  } else if (name == "format" || name == "quantizer") {  // quantizer: the section's old name
    if (std::exchange(formats_given_, true)) {
      reader.error(value, "give the formats once: 'quantizer' is the old name of 'format'");
      return;
    }
    // A plain name sets both; a mapping sets the ones it names.
    if (value.node.IsScalar()) {
      if (reader.component(value, config_.k_format)) config_.v_format = config_.k_format;
    } else if (value.node.IsMap()) {
      reader.for_each_entry(value, {"k", "v"}, visit(&Overlay::quantizer_key));
    } else {
      reader.error(value, "expected a name (for both k and v) or a mapping with keys k, v, got " +
                              detail::describe(value.node));
    }
  } else if (name == "mask") {
    reader.component(value, config_.mask);
  } else if (name == "eviction") {
    reader.component(value, config_.eviction);
  } else if (name == "layers") {
    layers_ = read_layers(reader, value);
  } else if (name == "plugins") {
    reader.for_each_entry(value, {"paths", "required"}, visit(&Overlay::plugins_key));
  } else if (name == "remote") {
    // A mapping states what differs from the section before it, or from the defaults.
    RemoteSettings remote;
    remote.where = value.where;
    if (config_.remote) remote = *config_.remote;
    const std::size_t errors = errors_.size();
    reader.for_each_entry(
        value, {"transport", "endpoints", "namespace", "model", "write", "read", "breaker"},
        [&](const std::string& k, const Field& f) { remote_key(reader, remote, k, f); });
    if (errors_.size() == errors && value.node.IsMap()) config_.remote = remote;
  }
}

void Overlay::model_preset(YamlReader& reader, const Field& value) {
  const std::optional<std::string> name = reader.text(value, "a model's name");
  if (!name) return;
  const ModelPreset* preset = find_model_preset(*name);
  if (preset == nullptr) {
    std::vector<std::string> names;
    for (const ModelPreset& p : model_presets()) names.push_back(p.name);
    reader.error(value, "unknown model '" + *name + "'" + did_you_mean(*name, names) +
                            "; presets: " + name_list(names));
    return;
  }
  config_.model = preset->shape;
  config_.rope = preset->rope;
  q_heads_where_ = kv_heads_where_ = value.where;
}

void Overlay::model_key(YamlReader& reader, const std::string& key, const Field& value) {
  if (key == "preset") return;  // applied before the other keys
  if (key == "rope") {
    // A mapping states what differs from the rope before it (the preset's), or from the defaults.
    Rope rope = config_.rope.value_or(Rope{});
    const std::size_t errors = errors_.size();
    reader.for_each_entry(
        value, {"theta", "dims", "style", "scaling"},
        [&](const std::string& k, const Field& f) { rope_key(reader, rope, k, f); });
    if (errors_.size() == errors && value.node.IsMap()) config_.rope = rope;
    return;
  }
  const std::optional<std::uint32_t> count = reader.positive_int(value);
  if (key == "q_heads" || key == "kv_heads") {
    head_count_unreadable_ = head_count_unreadable_ || !count;
    (key == "q_heads" ? q_heads_where_ : kv_heads_where_) = value.where;
  }
  if (!count) return;
  // Bounds far above any published model, so that sizes derived from them cannot overflow.
  const std::uint32_t limit = key == "layers" ? 4096 : key == "head_dim" ? 4096 : 65536;
  if (*count > limit) {
    reader.error(value,
                 "at most " + std::to_string(limit) + " expected, got " + std::to_string(*count));
    return;
  }
  ModelShape& model = config_.model;
  if (key == "layers") model.layers = *count;
  if (key == "q_heads") model.q_heads = *count;
  if (key == "kv_heads") model.kv_heads = *count;
  if (key == "head_dim") model.head_dim = *count;
}

void Overlay::rope_key(YamlReader& reader, Rope& rope, const std::string& key, const Field& value) {
  if (key == "theta") {
    if (const auto theta = reader.positive_number(value)) rope.theta = *theta;
  } else if (key == "dims") {
    if (const auto dims = reader.positive_int(value)) {
      if (*dims % 2 != 0)
        reader.error(value, "expected an even number (elements rotate in pairs), got " +
                                std::to_string(*dims));
      else
        rope.dims = *dims;
    }
  } else if (key == "style") {
    const std::optional<std::string> style = reader.text(value, "a style");
    if (!style) return;
    if (*style == "neox" || *style == "gptj")
      rope.style = *style == "neox" ? RopeStyle::neox : RopeStyle::gptj;
    else
      reader.error(value, "expected neox (rotate_half) or gptj (adjacent pairs), got '" + *style +
                              "'" + did_you_mean(*style, std::vector<std::string>{"neox", "gptj"}));
  } else if (key == "scaling") {
    RopeScaling scaling;
    reader.for_each_entry(
        value, {"type", "factor", "low_freq_factor", "high_freq_factor", "original_context"},
        [&](const std::string& k, const Field& f) { scaling_key(reader, scaling, k, f); });
    rope.scaling = scaling;
  }
}

void Overlay::scaling_key(YamlReader& reader, RopeScaling& scaling, const std::string& key,
                          const Field& value) {
  if (key == "type") {
    const std::optional<std::string> type = reader.text(value, "a scaling type");
    if (!type) return;
    const std::vector<std::string> types{"none", "linear", "llama3"};
    if (*type == "none")
      scaling.kind = RopeScaling::Kind::none;
    else if (*type == "linear")
      scaling.kind = RopeScaling::Kind::linear;
    else if (*type == "llama3")
      scaling.kind = RopeScaling::Kind::llama3;
    else
      reader.error(value, "expected one of none, linear, llama3, got '" + *type + "'" +
                              did_you_mean(*type, types));
    return;
  }
  const std::optional<double> number = reader.positive_number(value);
  if (!number) return;
  if (key == "factor") scaling.factor = *number;
  if (key == "low_freq_factor") scaling.low_freq_factor = *number;
  if (key == "high_freq_factor") scaling.high_freq_factor = *number;
  if (key == "original_context") scaling.original_context = *number;
}

void Overlay::cache_key(YamlReader& reader, const std::string& key, const Field& value) {
  if (key == "page_size") {
    const std::optional<std::uint32_t> page_size = reader.positive_int(value);
    if (!page_size) return;
    if (*page_size > kMaxPageSize || !std::has_single_bit(*page_size)) {
      reader.error(value, "expected a power of two from 1 to " + std::to_string(kMaxPageSize) +
                              ", got '" + std::to_string(*page_size) + "'");
      return;
    }
    config_.cache.page_size = *page_size;
  } else if (key == "capacity") {
    const std::optional<std::uint64_t> capacity = reader.size(value);
    if (!capacity) return;
    if (*capacity == 0) {
      reader.error(value, "expected a size greater than zero, got '" + value.node.Scalar() + "'");
      return;
    }
    config_.cache.capacity_bytes = *capacity;
  } else if (key == "prefix_caching") {
    if (const auto enabled = reader.boolean(value)) config_.cache.prefix_caching = *enabled;
  }
}

void Overlay::quantizer_key(YamlReader& reader, const std::string& key, const Field& value) {
  reader.component(value, key == "k" ? config_.k_format : config_.v_format);
}

void Overlay::plugins_key(YamlReader& reader, const std::string& key, const Field& value) {
  if (key == "paths") {
    const auto items = reader.items(value, "a list of plugin files or folders");
    if (!items) return;
    std::vector<PluginPath> paths;
    bool ok = true;
    for (const Field& item : *items) {
      auto path = plugin_path(reader, item);
      ok = ok && path.has_value();
      if (path) paths.push_back(std::move(*path));
    }
    if (ok) config_.plugins.paths = std::move(paths);
  } else if (key == "required") {
    const auto items = reader.items(value, "a list of plugin names, file names or paths");
    if (!items) return;
    std::vector<RequiredPlugin> required;
    bool ok = true;
    for (const Field& item : *items) {
      auto name = reader.text(item, "a plugin name, file name or path");
      ok = ok && name.has_value();
      if (name) required.push_back({std::move(*name), item.where});
    }
    if (ok) config_.plugins.required = std::move(required);
  }
}

// The backend preference list: each entry is a component ("NAME" or {name: NAME, <options>}),
// and a lone entry without a list is a list of one. The list replaces the previous one only when
// every entry reads, so a bad entry leaves no half-read list behind.
void Overlay::backend_list(YamlReader& reader, const Field& value) {
  std::vector<Field> entries;
  if (value.node.IsScalar() || value.node.IsMap()) {
    entries.push_back(value);
  } else if (value.node.IsSequence() && value.node.size() > 0) {
    entries = *reader.items(value, "a list");
  } else {
    reader.error(value,
                 "expected a backend name, a mapping with 'name' and options, or a non-empty list "
                 "of them, got " +
                     detail::describe(value.node));
    return;
  }
  std::vector<ComponentChoice> backends(entries.size());
  bool ok = true;
  for (std::size_t i = 0; i < entries.size(); ++i)
    ok = reader.component(entries[i], backends[i]) && ok;
  if (!ok) return;
  config_.backends = std::move(backends);
  config_.backends_where = value.where;
}

// A path entry is "PATH" or {path: PATH, required: BOOL}.
std::optional<PluginPath> Overlay::plugin_path(YamlReader& reader, const Field& item) {
  if (item.node.IsScalar()) {
    auto path = reader.text(item, "a path");
    if (!path) return std::nullopt;
    return PluginPath{std::move(*path), false, item.where};
  }
  if (!item.node.IsMap()) {
    reader.error(item, "expected a path or a mapping with keys path, required, got " +
                           detail::describe(item.node));
    return std::nullopt;
  }
  PluginPath result;
  bool has_path = false;
  bool ok = true;
  const auto visit = [&](const std::string& key, const Field& value) {
    if (key == "path") {
      auto path = reader.text(value, "a path");
      has_path = true;
      ok = ok && path.has_value();
      if (path) result = {std::move(*path), result.required, value.where};
    } else if (const auto required = reader.boolean(value)) {
      result.required = *required;
    } else {
      ok = false;
    }
  };
  reader.for_each_entry(item, {"path", "required"}, visit);
  if (!has_path) reader.error(item, "missing key 'path'");
  if (!has_path || !ok) return std::nullopt;
  return result;
}

void Overlay::check() {
  if (layers_) resolve_layers(*layers_, config_, errors_);
  if (config_.remote && config_.remote->transport.name.empty())
    errors_.push_back({Diagnostic::Severity::error, config_.remote->where, "remote.transport",
                       "the remote tier needs a transport (e.g. transport: memory)"});
  if (config_.remote && config_.remote->model.empty())
    errors_.push_back({Diagnostic::Severity::error, config_.remote->where, "remote.model",
                       "the remote tier needs the model's identity (e.g. model: "
                       "\"smollm2-135m@<weights sha256>\"), so that only hosts running the same "
                       "weights share pages"});
  if (config_.remote && !config_.cache.prefix_caching)
    errors_.push_back({Diagnostic::Severity::error, config_.remote->where, "remote",
                       "the remote tier shares prefix pages: it needs cache.prefix_caching: true"});
  const ModelShape& model = config_.model;
  if (head_count_unreadable_ || model.kv_heads == 0 || model.q_heads % model.kv_heads == 0) return;
  // Point at what the user wrote: kv_heads, unless only q_heads was changed from the default.
  const bool q_heads_only =
      kv_heads_where_.origin == kDefaultOrigin && q_heads_where_.origin != kDefaultOrigin;
  errors_.push_back({Diagnostic::Severity::error, q_heads_only ? q_heads_where_ : kv_heads_where_,
                     q_heads_only ? "model.q_heads" : "model.kv_heads",
                     "q_heads (" + std::to_string(model.q_heads) +
                         ") must be a multiple of kv_heads (" + std::to_string(model.kv_heads) +
                         ")"});
}

}  // namespace detail

namespace {

using detail::kDefaultOrigin;
using detail::Overlay;

// The default, then `yaml` if given, then `env`; throws ConfigError listing every error.
Config resolve(std::optional<std::string_view> yaml, const std::string& origin,
               const Environment& env) {
  Config config;
  config.origin = origin;
  std::vector<Diagnostic> errors;
  Overlay overlay(config, errors);
  overlay.apply_yaml(default_config_yaml(), std::string(kDefaultOrigin));
  if (yaml) overlay.apply_yaml(*yaml, origin);
  overlay.apply_environment(env);
  overlay.check();
  if (!errors.empty()) {
    errors.insert(errors.end(), config.warnings.begin(), config.warnings.end());
    throw ConfigError(std::move(errors));
  }
  return config;
}

std::string joined(const std::vector<Diagnostic>& diagnostics) {
  std::string text;
  for (const Diagnostic& diagnostic : diagnostics) {
    if (!text.empty()) text += '\n';
    text += to_string(diagnostic);
  }
  return text;
}

}  // namespace

std::string to_string(const SourceLocation& where) {
  if (where.line == 0) return where.origin;
  std::string text = where.origin + ":" + std::to_string(where.line);
  if (where.column != 0) text += ":" + std::to_string(where.column);
  return text;
}

std::string to_string(const Diagnostic& diagnostic) {
  const bool error = diagnostic.severity == Diagnostic::Severity::error;
  return to_string(diagnostic.where) + (error ? ": error: " : ": warning: ") +
         (diagnostic.key.empty() ? "" : diagnostic.key + ": ") + diagnostic.message;
}

ConfigError::ConfigError(std::vector<Diagnostic> diagnostics)
    : Error(Code::invalid_argument, joined(diagnostics)), diagnostics_(std::move(diagnostics)) {}

std::string_view default_config_yaml() {
  return detail::default_config_text;
}

Config default_config(const Environment& env) {
  return resolve(std::nullopt, std::string(kDefaultOrigin), env);
}

Config parse_config(std::string_view yaml, const std::string& origin, const Environment& env) {
  return resolve(yaml, origin, env);
}

Config load_config(const std::filesystem::path& file, const Environment& env) {
  const std::string name = file.string();
  std::error_code ignored;
  std::string reason;
  std::ostringstream text;
  if (std::filesystem::is_directory(file, ignored)) {
    reason = std::strerror(EISDIR);
  } else if (std::ifstream in(file, std::ios::binary); !in) {
    reason = std::strerror(errno);
  } else if (!(text << in.rdbuf()) && in.bad()) {
    reason = std::strerror(errno);
  }
  if (!reason.empty()) {
    throw ConfigError({{Diagnostic::Severity::error,
                        {name, 0, 0},
                        "",
                        "cannot read config file '" + name + "': " + reason}});
  }
  return resolve(text.str(), name, env);
}

Config read_config(std::string_view path_or_yaml, const Environment& env) {
  if (path_or_yaml.empty()) return default_config(env);
  // A text longer than a file name may be makes exists() fail (ENAMETOOLONG): it is YAML then.
  std::error_code not_a_file;
  const bool yaml = path_or_yaml.find_first_of(":\n") != std::string_view::npos &&
                    !std::filesystem::exists(std::filesystem::path(path_or_yaml), not_a_file);
  return yaml ? parse_config(path_or_yaml, "<yaml text>", env)
              : load_config(std::filesystem::path(path_or_yaml), env);
}

}  // namespace kvcache
