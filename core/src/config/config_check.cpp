#include <string>

#include "kvcache/config.hpp"
#include "kvcache/nearest_name.hpp"
#include "kvcache/registry.hpp"

namespace kvcache {
namespace {

// Creating the component once lets the plugin itself validate the name's options.
template <class Create>
void check_choice(const ComponentChoice& choice, const std::string& key, Create&& create,
                  std::vector<Diagnostic>& out) {
  try {
    create(choice.name, choice.options);
  } catch (const Error& e) {
    out.push_back({Diagnostic::Severity::error, choice.where, key, e.what()});
  }
}

}  // namespace

std::vector<Diagnostic> check_components(const Config& config, const Registry& registry) {
  std::vector<Diagnostic> out;
  const std::vector<std::string> backends = registry.names(ComponentKind::backend);
  bool any_available = false;
  for (const std::string& name : config.backends) {
    const ComponentInfo* info = registry.find(ComponentKind::backend, name);
    if (info == nullptr) {
      out.push_back(
          {Diagnostic::Severity::warning, config.backends_where, "backend",
           "backend '" + name + "' is not installed here" + did_you_mean(name, backends)});
    } else if (info->available) {
      any_available = true;
    }
  }
  if (!any_available)
    out.push_back({Diagnostic::Severity::warning, config.backends_where, "backend",
                   "no backend of the preference list is available on this host, so a cache "
                   "cannot be opened here"});
  const auto quantizer = [&](const auto&... a) { registry.create_quantizer(a...); };
  check_choice(config.k_quantizer, "quantizer.k", quantizer, out);
  check_choice(config.v_quantizer, "quantizer.v", quantizer, out);
  check_choice(
      config.mask, "mask", [&](const auto&... a) { registry.create_mask(a...); }, out);
  if (config.eviction.name == "none") {
    if (!config.eviction.options.empty())
      out.push_back({Diagnostic::Severity::error, config.eviction.where, "eviction",
                     "eviction 'none' takes no options"});
  } else {
    check_choice(
        config.eviction, "eviction", [&](const auto&... a) { registry.create_eviction(a...); },
        out);
  }
  return out;
}

}  // namespace kvcache
