// `kvcache plugins [--json]`: every component found, and every plugin file refused with why.
#include <iostream>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "kvcache/registry.hpp"

namespace kvcache::tool {
namespace {

std::string list_or_any(const auto& values) {
  return values.empty() ? std::string("any") : fmt::format("{}", fmt::join(values, ","));
}

std::string status_of(const ComponentInfo& c) {
  if (!c.shadowed_by.empty()) return "shadowed by " + c.shadowed_by;
  return c.available ? "available" : "unavailable: " + c.unavailable_reason;
}

nlohmann::json to_json(const Registry& registry, const SearchPlan& plan) {
  nlohmann::json out;
  out["components"] = nlohmann::json::array();
  for (const ComponentInfo& c : registry.components()) {
    out["components"].push_back({
        {"kind", kind_name(c.kind)},
        {"name", c.name},
        {"version", c.version},
        {"plugin", c.plugin},
        {"plugin_version", c.plugin_version},
        {"file", c.file.string()},
        {"capabilities",
         {{"formats", c.capabilities.formats},
          {"head_dims", c.capabilities.head_dims},
          {"page_sizes", c.capabilities.page_sizes},
          {"device_kind", c.capabilities.device_kind},
          {"foreign_formats", c.capabilities.foreign_formats},
          {"numerics", c.capabilities.numerics},
          {"query_rotation", c.capabilities.query_rotation},
          {"engine_streams", c.capabilities.engine_streams}}},
        {"available", c.available},
        {"unavailable_reason", c.unavailable_reason},
        {"shadowed_by", c.shadowed_by},
    });
  }
  out["rejected"] = nlohmann::json::array();
  for (const RejectedPlugin& r : registry.rejected())
    out["rejected"].push_back({{"file", r.file.string()}, {"reason", r.reason}});
  const auto strings = [](const std::vector<std::filesystem::path>& paths) {
    std::vector<std::string> s;
    for (const auto& p : paths) s.push_back(p.string());
    return s;
  };
  out["search"] = {{"forced_files", strings(plan.forced_files)},
                   {"env_entries", strings(plan.env_entries)},
                   {"config_dirs", strings(plan.config_dirs)},
                   {"install_dir", plan.install_dir.string()},
                   {"library_dir", plan.library_dir.string()}};
  return out;
}

void print_table(const Registry& registry, const SearchPlan& plan) {
  const auto& components = registry.components();
  std::cout << fmt::format("{} components\n", components.size());
  std::cout << fmt::format("  {:<10} {:<16} {:<8} {:<22} {}\n", "KIND", "NAME", "VERSION", "PLUGIN",
                           "STATUS");
  for (const ComponentInfo& c : components) {
    std::cout << fmt::format("  {:<10} {:<16} {:<8} {:<22} {}\n", kind_name(c.kind), c.name,
                             c.version, c.plugin + " " + c.plugin_version, status_of(c));
    const Capabilities& caps = c.capabilities;
    std::cout << fmt::format("  {:<10} file {}\n", "", c.file.string());
    if (!caps.formats.empty() || !caps.head_dims.empty() || !caps.page_sizes.empty() ||
        !caps.device_kind.empty())
      std::cout << fmt::format("  {:<10} device {}, formats {}, head_dims {}, page_sizes {}\n", "",
                               caps.device_kind.empty() ? "any" : caps.device_kind,
                               list_or_any(caps.formats), list_or_any(caps.head_dims),
                               list_or_any(caps.page_sizes));
    if (c.kind == ComponentKind::backend)
      std::cout << fmt::format(
          "  {:<10} {}; {}; {}; numerics {}\n", "",
          caps.foreign_formats ? "any other format through its own codec" : "no other format",
          caps.query_rotation ? "turns queries (positions within the cache)"
                              : "does not turn queries",
          caps.engine_streams ? "runs steps on the engine's stream" : "takes no engine stream",
          caps.numerics.dump());
  }
  const auto& rejected = registry.rejected();
  std::cout << fmt::format("{} plugin files rejected\n", rejected.size());
  for (const RejectedPlugin& r : rejected)
    std::cout << fmt::format("  {}\n      {}\n", r.file.string(), r.reason);
  std::cout << "searched, in order: config files, KVCACHE_PLUGIN_PATH, config folders, "
            << (plan.install_dir.empty() ? "" : plan.install_dir.string() + ", ")
            << plan.library_dir.string() << "\n";
}

}  // namespace

void add_plugins_command(CLI::App& app, const Globals& globals) {
  CLI::App* sub = app.add_subcommand("plugins",
                                     "List every plugin component found and every "
                                     "plugin file rejected, with the reason");
  examples(sub, {"kvcache plugins", "KVCACHE_PLUGIN_PATH=./build kvcache plugins --json"});
  auto json = std::make_shared<bool>(false);
  sub->add_flag("--json", *json, "print one JSON object");
  sub->callback([&globals, json] {
    const Config config = selected_config(globals);
    const auto registry = Registry::load(config.plugins);
    const SearchPlan plan = Registry::search_plan(config.plugins);
    if (*json)
      std::cout << to_json(*registry, plan).dump(2) << '\n';
    else
      print_table(*registry, plan);
  });
}

}  // namespace kvcache::tool
