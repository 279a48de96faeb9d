// to_yaml: a Config written back as YAML that reads to the same Config (`kvcache config show`).
#include <yaml-cpp/yaml.h>

#include "config/layers_reader.hpp"
#include "kvcache/config.hpp"

namespace kvcache {
namespace {

using detail::layer_ranges;

// Strings that would read back as another type, or not at all, must be quoted.
bool needs_quotes(const std::string& text) {
  return text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL" ||
         !detail::scalar_to_json(text).is_string();
}

void emit_json(YAML::Emitter& out, const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::object:
      out << YAML::BeginMap;
      for (const auto& [key, item] : value.items()) {
        out << YAML::Key << key << YAML::Value;
        emit_json(out, item);
      }
      out << YAML::EndMap;
      break;
    case nlohmann::json::value_t::array:
      out << YAML::BeginSeq;
      for (const auto& item : value) emit_json(out, item);
      out << YAML::EndSeq;
      break;
    case nlohmann::json::value_t::string: {
      const auto& text = value.get_ref<const std::string&>();
      if (needs_quotes(text)) out << YAML::DoubleQuoted;
      out << text;
      break;
    }
    case nlohmann::json::value_t::boolean:
      out << value.get<bool>();
      break;
    case nlohmann::json::value_t::number_integer:
      out << value.get<std::int64_t>();
      break;
    case nlohmann::json::value_t::number_unsigned:
      out << value.get<std::uint64_t>();
      break;
    // JSON's text is the shortest that reads back exactly, and always looks like a double.
    case nlohmann::json::value_t::number_float:
      out << value.dump();
      break;
    default:
      out << YAML::Null;
      break;
  }
}

void emit_component(YAML::Emitter& out, const ComponentChoice& choice) {
  if (choice.options.empty()) {
    out << choice.name;
    return;
  }
  out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << choice.name;
  for (const auto& [key, item] : choice.options.items()) {
    out << YAML::Key << key << YAML::Value;
    emit_json(out, item);
  }
  out << YAML::EndMap;
}

// model: the shape and RoPE.
void emit_model(YAML::Emitter& out, const Config& config) {
  out << YAML::Key << "model" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "layers" << YAML::Value << config.model.layers;
  out << YAML::Key << "q_heads" << YAML::Value << config.model.q_heads;
  out << YAML::Key << "kv_heads" << YAML::Value << config.model.kv_heads;
  out << YAML::Key << "head_dim" << YAML::Value << config.model.head_dim;
  if (config.rope) {
    const Rope& r = *config.rope;
    out << YAML::Key << "rope" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "theta" << YAML::Value << r.theta;
    if (r.dims != 0) out << YAML::Key << "dims" << YAML::Value << r.dims;
    out << YAML::Key << "style" << YAML::Value << to_string(r.style);
    if (r.scaling.kind != RopeScaling::Kind::none) {
      out << YAML::Key << "scaling" << YAML::Value << YAML::BeginMap;
      out << YAML::Key << "type" << YAML::Value << to_string(r.scaling.kind);
      out << YAML::Key << "factor" << YAML::Value << r.scaling.factor;
      out << YAML::Key << "low_freq_factor" << YAML::Value << r.scaling.low_freq_factor;
      out << YAML::Key << "high_freq_factor" << YAML::Value << r.scaling.high_freq_factor;
      out << YAML::Key << "original_context" << YAML::Value << r.scaling.original_context;
      out << YAML::EndMap;
    }
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
}

// layers: the groups, each its mask, formats and layers.
void emit_layers(YAML::Emitter& out, const Config& config) {
  out << YAML::Key << "layers" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "groups" << YAML::Value << YAML::BeginMap;
  for (const LayerGroup& group : config.layer_groups) {
    out << YAML::Key << group.name << YAML::Value << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "mask" << YAML::Value;
    emit_component(out, group.mask);
    out << YAML::Key << "format" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "k" << YAML::Value;
    emit_component(out, group.k_format);
    out << YAML::Key << "v" << YAML::Value;
    emit_component(out, group.v_format);
    out << YAML::EndMap;
    out << YAML::Key << "layers" << YAML::Value << layer_ranges(group.layers);
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  out << YAML::Key << "context" << YAML::Value << config.group_context;
  if (config.group_rollback > 0)
    out << YAML::Key << "rollback" << YAML::Value << config.group_rollback;
  out << YAML::EndMap;
}

// plugins: the paths a file named and the plugins it requires.
void emit_plugins(YAML::Emitter& out, const Config& config) {
  // env_paths are left out: they come from KVCACHE_PLUGIN_PATH, not from a file.
  out << YAML::Key << "plugins" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "paths" << YAML::Value << YAML::BeginSeq;
  for (const PluginPath& path : config.plugins.paths) {
    if (!path.required) {
      out << path.path;
      continue;
    }
    out << YAML::BeginMap << YAML::Key << "path" << YAML::Value << path.path;
    out << YAML::Key << "required" << YAML::Value << true << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::Key << "required" << YAML::Value << YAML::BeginSeq;
  for (const RequiredPlugin& plugin : config.plugins.required) out << plugin.name;
  out << YAML::EndSeq << YAML::EndMap;
}

// remote: the remote tier.
void emit_remote(YAML::Emitter& out, const RemoteSettings& r) {
  out << YAML::Key << "remote" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "transport" << YAML::Value << YAML::Flow;
  emit_component(out, r.transport);
  out << YAML::Key << "endpoints" << YAML::Value << YAML::Flow << r.endpoints;
  out << YAML::Key << "namespace" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "label" << YAML::Value << r.label;
  if (!r.salt_env.empty()) out << YAML::Key << "salt_env" << YAML::Value << r.salt_env;
  out << YAML::EndMap;
  out << YAML::Key << "model" << YAML::Value << YAML::DoubleQuoted << r.model;
  out << YAML::Key << "write" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "queue" << YAML::Value << format_size(r.queue_bytes) << YAML::EndMap;
  out << YAML::Key << "read" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "min_pages" << YAML::Value << r.min_pages;
  out << YAML::Key << "batch_pages" << YAML::Value << r.batch_pages;
  out << YAML::Key << "deadline_ms" << YAML::Value << r.deadline_ms << YAML::EndMap;
  out << YAML::Key << "breaker" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "failures" << YAML::Value << r.breaker_failures;
  out << YAML::Key << "open_ms" << YAML::Value << r.breaker_open_ms << YAML::EndMap;
  out << YAML::EndMap;
}

}  // namespace

std::string to_yaml(const Config& config) {
  YAML::Emitter out;
  out << YAML::Comment("kvcache configuration resolved from " + config.origin);
  out << YAML::BeginMap;
  emit_model(out, config);
  out << YAML::Key << "backend" << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (const ComponentChoice& backend : config.backends) emit_component(out, backend);
  out << YAML::EndSeq;
  out << YAML::Key << "cache" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "page_size" << YAML::Value << config.cache.page_size;
  out << YAML::Key << "capacity" << YAML::Value << format_size(config.cache.capacity_bytes);
  out << YAML::Key << "prefix_caching" << YAML::Value << config.cache.prefix_caching;
  out << YAML::EndMap;
  out << YAML::Key << "format" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "k" << YAML::Value;
  emit_component(out, config.k_format);
  out << YAML::Key << "v" << YAML::Value;
  emit_component(out, config.v_format);
  out << YAML::EndMap;
  out << YAML::Key << "mask" << YAML::Value << YAML::Flow;
  emit_component(out, config.mask);
  out << YAML::Key << "eviction" << YAML::Value << YAML::Flow;
  emit_component(out, config.eviction);
  if (!config.layer_groups.empty()) emit_layers(out, config);
  emit_plugins(out, config);
  if (config.remote) emit_remote(out, *config.remote);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace kvcache
