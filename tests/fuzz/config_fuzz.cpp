// The YAML config reader and checker: any text either parses or throws ConfigError whose every
// diagnostic has a place; what parses writes back as YAML that parses to the same YAML; and the
// components it names are checked against the installed plugins.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz_input.hpp"
#include "kvcache/config.hpp"
#include "kvcache/registry.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvcache;
  static const std::shared_ptr<const Registry> registry = Registry::load(PluginSettings{});
  const std::string origin = "fuzz.yaml";
  Config config;
  try {
    config = parse_config(fuzz::as_text(data, size), origin, Environment{});
  } catch (const ConfigError& e) {
    if (e.diagnostics().empty()) std::abort();  // an error must say what is wrong
    for (const Diagnostic& d : e.diagnostics())
      if (d.message.empty() || d.where.origin.empty()) std::abort();
    return 0;
  }
  const std::string yaml = to_yaml(config);
  if (to_yaml(parse_config(yaml, origin, Environment{})) != yaml) std::abort();
  try {
    for (const Diagnostic& d : check_components(config, *registry))
      if (d.message.empty()) std::abort();
  } catch (const Error&) {
    // a component refused its options: an error with a message is the contract
  }
  return 0;
}
