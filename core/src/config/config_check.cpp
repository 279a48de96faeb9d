#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "kvcache/config.hpp"
#include "kvcache/mask.hpp"
#include "kvcache/nearest_name.hpp"
#include "kvcache/registry.hpp"
#include "kvcache/remote/transports.hpp"
#include "kvcache/rope.hpp"

namespace kvcache {
namespace {

// Creating the component once lets the plugin itself validate the name's options.
template <class Create>
void check_choice(const ComponentChoice& choice, const std::string& key, Create&& create,
                  std::vector<Diagnostic>& out) {
  try {
    create(choice.name, choice.options);
  } catch (const Error& e) {
    // A message about one option ("option 'window': ...", "unknown option 'windw'") points at
    // that option's line; anything else at the name.
    const std::string message = e.what();
    SourceLocation where = choice.where;
    for (const auto& [option, location] : choice.option_where)
      if (message.find("option '" + option + "'") != std::string::npos) where = location;
    out.push_back({Diagnostic::Severity::error, where, key, message});
  }
}

// Each layer group's mask and formats, as the top-level ones are checked; what a group took from
// the top-level sections was checked there. A mask that states no window keeps every token.
void check_layer_groups(const Config& config, const Registry& registry,
                        const ComponentInfo* backend, std::vector<Diagnostic>& out) {
  const auto same = [](const ComponentChoice& a, const ComponentChoice& b) {
    return a.name == b.name && a.options == b.options;
  };
  for (const LayerGroup& group : config.layer_groups) {
    const std::string key = "layers.groups." + group.name;
    if (!same(group.mask, config.mask))
      check_choice(
          group.mask, key + ".mask",
          [&](const std::string& name, const nlohmann::json& options) {
            const MaskDescription d = registry.create_mask(name, options)->describe();
            if (d.kind == MaskKind::custom)
              out.push_back({Diagnostic::Severity::warning, group.mask.where, key + ".mask",
                             "mask '" + name + "' states no window, so group '" + group.name +
                                 "' keeps every token, as a global group does"});
          },
          out);
    for (const auto& [suffix, choice, top] :
         {std::tuple{".format.k", &group.k_format, &config.k_format},
          std::tuple{".format.v", &group.v_format, &config.v_format}}) {
      if (same(*choice, *top)) continue;
      check_choice(
          *choice, key + suffix,
          [&](const std::string& name, const nlohmann::json& options) {
            registry.create_quantizer(name, options)
                ->describe(config.model.head_dim, config.cache.page_size);
          },
          out);
      if (backend != nullptr)
        if (const auto why = format_refusal(*backend, choice->name))
          out.push_back({Diagnostic::Severity::error, choice->where, key + suffix, *why});
    }
  }
  if (!config.layer_groups.empty() && config.cache.prefix_caching)
    out.push_back({Diagnostic::Severity::warning, config.layer_groups.front().where, "layers",
                   "prefix caching is off in a cache of several layer groups: matching a prefix "
                   "per group is not built yet"});
}

}  // namespace

std::vector<Diagnostic> check_components(const Config& config, const Registry& registry) {
  std::vector<Diagnostic> out;
  const std::vector<std::string> backends = registry.names(ComponentKind::backend);
  bool any_available = false;
  // Every available backend of the list has its options checked, not only the one chosen here:
  // the same file may run on a host where an earlier one is unavailable. An unavailable backend
  // cannot be created, so its options wait until a host where it runs.
  for (const ComponentChoice& backend : config.backends) {
    const ComponentInfo* info = registry.find(ComponentKind::backend, backend.name);
    if (info == nullptr) {
      out.push_back({Diagnostic::Severity::warning, backend.where, "backend",
                     "backend '" + backend.name + "' is not installed here" +
                         did_you_mean(backend.name, backends)});
    } else if (info->available) {
      any_available = true;
      check_choice(
          backend, "backend", [&](const auto&... a) { registry.create_backend(a...); }, out);
    }
  }
  if (!any_available)
    out.push_back({Diagnostic::Severity::warning, config.backends_where, "backend",
                   "no backend of the preference list is available on this host, so a cache "
                   "cannot be opened here"});
  // A quantizer must also fit this model's head_dim and page size (e.g. a kivi-k group must
  // divide the page): its plugin says so when asked for the tile layout.
  const std::size_t before_quantizers = out.size();
  const auto quantizer = [&](const std::string& name, const nlohmann::json& options) {
    registry.create_quantizer(name, options)
        ->describe(config.model.head_dim, config.cache.page_size);
  };
  check_choice(config.k_format, "format.k", quantizer, out);
  const bool same_choice = config.v_format.name == config.k_format.name &&
                           config.v_format.options == config.k_format.options;
  if (!same_choice) check_choice(config.v_format, "format.v", quantizer, out);
  // The chosen backend (the first available one) must run both formats.
  for (const ComponentChoice& backend : config.backends) {
    const ComponentInfo* info = registry.find(ComponentKind::backend, backend.name);
    if (info == nullptr || !info->available) continue;
    const std::vector<Diagnostic> refused = format_refusals(config, *info);
    out.insert(out.end(), refused.begin(), refused.end());
    break;
  }
  // Only the quantizers' own errors count here, not a backend's from above.
  const bool quantizers_ok =
      std::none_of(out.begin() + static_cast<std::ptrdiff_t>(before_quantizers), out.end(),
                   [](const Diagnostic& d) { return d.severity == Diagnostic::Severity::error; });
  std::optional<Diagnostic> positions;
  check_choice(
      config.mask, "mask",
      [&](const std::string& name, const nlohmann::json& options) {
        const auto mask = registry.create_mask(name, options);
        for (const ComponentChoice& backend : config.backends) {  // the chosen one
          const ComponentInfo* info = registry.find(ComponentKind::backend, backend.name);
          if (info == nullptr || !info->available) continue;
          positions = position_check(config, *info, *mask);
          break;
        }
      },
      out);
  if (positions) out.push_back(*positions);
  if (config.eviction.name == "none") {
    if (!config.eviction.options.empty())
      out.push_back({Diagnostic::Severity::error, config.eviction.where, "eviction",
                     "eviction 'none' takes no options"});
  } else {
    std::optional<Diagnostic> drops;
    check_choice(
        config.eviction, "eviction",
        [&](const std::string& name, const nlohmann::json& options) {
          if (registry.find(ComponentKind::eviction, name) == nullptr) {
            std::vector<std::string> known = registry.names(ComponentKind::eviction);
            known.push_back("none");  // built in: no eviction
            throw Error(Code::not_found,
                        "unknown eviction '" + name + "'" + did_you_mean(name, known));
          }
          const auto policy = registry.create_eviction(name, options);
          if (quantizers_ok) drops = token_drop_check(config, registry, *policy);
        },
        out);
    if (drops) out.push_back(*drops);
  }
  const ComponentInfo* chosen = nullptr;  // the first available backend of the list
  for (const ComponentChoice& backend : config.backends) {
    const ComponentInfo* info = registry.find(ComponentKind::backend, backend.name);
    if (info != nullptr && info->available) {
      chosen = info;
      break;
    }
  }
  check_layer_groups(config, registry, chosen, out);
  if (config.remote)
    check_choice(
        config.remote->transport, "remote.transport",
        [&](const std::string&, const nlohmann::json&) {
          remote::make_transport(*config.remote, registry);
        },
        out);
  return out;
}

std::vector<Diagnostic> format_refusals(const Config& config, const ComponentInfo& backend) {
  std::vector<Diagnostic> out;
  for (const auto& [key, choice] :
       {std::pair{"format.k", &config.k_format}, std::pair{"format.v", &config.v_format}})
    if (const auto why = format_refusal(backend, choice->name))
      out.push_back({Diagnostic::Severity::error, choice->where, key, *why});
  return out;
}

std::optional<Diagnostic> position_check(const Config& config, const ComponentInfo& backend,
                                         const AttentionMask& mask) {
  if (!mask.describe().positions_in_cache) return std::nullopt;
  const auto refuse = [&](const std::string& why) {
    return Diagnostic{Diagnostic::Severity::error, config.mask.where, "mask",
                      "mask '" + config.mask.name + "' places queries at positions within the " +
                          "cache, " + why};
  };
  if (!config.rope)
    return refuse("which needs the model's RoPE: set model.rope (theta, style) or model.preset");
  try {
    rope_frequencies(*config.rope, config.model.head_dim);
  } catch (const Error& e) {
    return refuse(std::string("but the model's RoPE does not fit: ") + e.what());
  }
  if (!backend.capabilities.query_rotation)
    return refuse("which backend '" + backend.name +
                  "' cannot attend at (it does not declare query_rotation, ABI 1.6)");
  return std::nullopt;
}

std::optional<Diagnostic> token_drop_check(const Config& config, const Registry& registry,
                                           const EvictionPolicy& policy) {
  const std::optional<bool> drops = policy.drops_tokens();
  if (drops == false) return std::nullopt;
  for (const auto& [key, choice] :
       {std::pair{"format.k", &config.k_format}, std::pair{"format.v", &config.v_format}}) {
    const TileLayout f = registry.create_quantizer(choice->name, choice->options)
                             ->describe(config.model.head_dim, config.cache.page_size);
    if (f.granularity != Granularity::channel) continue;
    const std::string eviction = "eviction '" + config.eviction.name + "'";
    const std::string format = std::string(key) + " " + choice->name + " (scales over groups of " +
                               std::to_string(f.group_size) + " tokens) cannot store";
    if (drops == true)
      return Diagnostic{Diagnostic::Severity::error, config.eviction.where, "eviction",
                        eviction + " drops tokens one by one, which " + format +
                            "; choose a per-token format there or an eviction that only preempts "
                            "(such as oldest-first, lru or priority)"};
    return Diagnostic{Diagnostic::Severity::warning, config.eviction.where, "eviction",
                      eviction + " does not declare whether it drops tokens one by one, which " +
                          format + ": if it does, the run stops at its first such drop"};
  }
  return std::nullopt;
}

}  // namespace kvcache
