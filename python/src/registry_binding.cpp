// Module-level views of what is installed: plugins(), formats(), check_config().
#include <filesystem>
#include <string>
#include <vector>

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "kvcache/config.hpp"
#include "kvcache/formats.hpp"
#include "kvcache/registry.hpp"

namespace nb = nanobind;

namespace kvcache::python {
namespace {

std::shared_ptr<const Registry> default_registry() {
  return Registry::load(default_config(process_environment()).plugins);
}

}  // namespace

void bind_registry(nb::module_& m) {
  m.def(
      "plugins",
      [] {
        const auto registry = default_registry();
        nb::list out;
        for (const ComponentInfo& c : registry->components()) {
          nb::dict d;
          d["kind"] = std::string(kind_name(c.kind));
          d["name"] = c.name;
          d["version"] = c.version;
          d["plugin"] = c.plugin;
          d["file"] = c.file.string();
          d["available"] = c.available;
          d["unavailable_reason"] = c.unavailable_reason;
          out.append(d);
        }
        for (const RejectedPlugin& r : registry->rejected()) {
          nb::dict d;
          d["kind"] = "rejected";
          d["file"] = r.file.string();
          d["unavailable_reason"] = r.reason;
          out.append(d);
        }
        return out;
      },
      "Every component found (the default search and KVCACHE_PLUGIN_PATH), and every plugin "
      "file refused (kind 'rejected') with the reason.");
  m.def(
      "formats", [] { return default_registry()->names(ComponentKind::quantizer); },
      "The storage formats installed: the built-in ones and any quantizer component found.");
  m.def(
      "check_config",
      [](const std::string& path_or_yaml) {
        std::vector<std::string> problems;
        try {
          const Config config = read_config(path_or_yaml, process_environment());
          for (const Diagnostic& d : config.warnings) problems.push_back(to_string(d));
          const auto registry = Registry::load(config.plugins);
          for (const Diagnostic& d : check_components(config, *registry))
            problems.push_back(to_string(d));
        } catch (const ConfigError& e) {
          for (const Diagnostic& d : e.diagnostics()) problems.push_back(to_string(d));
        }
        return problems;
      },
      nb::arg("path_or_yaml"),
      "Every error and warning of a config file or YAML text, as file:line:column: severity: "
      "message (empty: valid), its component names and options checked against what is "
      "installed.");
}

}  // namespace kvcache::python
