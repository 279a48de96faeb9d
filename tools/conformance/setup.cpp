#include "setup.hpp"

#include <algorithm>
#include <utility>

#include "kvcache/backend.hpp"
#include "kvcache/formats.hpp"

namespace kvcache::conformance {
namespace {

struct State {
  Setup setup;
  std::shared_ptr<const Registry> registry;
};
State& state() {
  static State s;
  return s;
}

}  // namespace

void configure(Setup setup) {
  if (!setup.format.empty() && !is_built_in_format(setup.format) &&
      std::find(setup.extra_formats.begin(), setup.extra_formats.end(), setup.format) ==
          setup.extra_formats.end())
    setup.extra_formats.push_back(setup.format);
  State& s = state();
  s.registry = Registry::load(setup.plugins);
  s.setup = std::move(setup);
}

const Setup& setup() {
  return state().setup;
}

const Registry& registry() {
  State& s = state();
  if (!s.registry) {  // not configured: the default config's search (beside libkvcache, env)
    Setup defaults;
    defaults.plugins = default_config(process_environment()).plugins;
    configure(std::move(defaults));
  }
  return *s.registry;
}

std::shared_ptr<const Registry> shared_registry() {
  registry();
  return state().registry;
}

std::vector<std::string> backend_names() {
  if (!setup().backend.empty()) return {setup().backend};
  std::vector<std::string> names = found_backends();
  std::erase_if(names, [](const std::string& name) {
    return !registry().find(ComponentKind::backend, name)->available;
  });
  return names;
}

std::vector<std::string> found_backends() {
  if (!setup().backend.empty()) return {setup().backend};
  return registry().names(ComponentKind::backend);
}

const std::vector<std::string>& extra_formats() {
  return setup().extra_formats;
}

bool wanted(const std::string& k_format, const std::string& v_format) {
  const std::string& only = setup().format;
  return only.empty() || k_format == only || v_format == only;
}

StoreSpec with_codecs(const StoreSpec& spec) {
  return kvcache::with_codecs(spec, registry());
}

std::string skip_reason(const std::string& backend, const StoreSpec& spec) {
  const ComponentInfo* info = registry().find(ComponentKind::backend, backend);
  if (info == nullptr) return "backend " + backend + " is not installed";
  if (!info->available) return "backend " + backend + " unavailable: " + info->unavailable_reason;
  for (const std::string& f : {spec.k_format, spec.v_format})
    if (const auto why = format_refusal(*info, f)) return *why;
  return {};
}

std::unique_ptr<CacheStore> open_store(const std::string& backend, const StoreSpec& spec) {
  if (!skip_reason(backend, spec).empty()) return nullptr;
  return registry().create_backend(backend)->create_store(with_codecs(spec));
}

}  // namespace kvcache::conformance
