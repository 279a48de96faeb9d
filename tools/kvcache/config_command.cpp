// `kvcache config check FILE` and `kvcache config show`.
#include <iostream>
#include <string>

#include "commands.hpp"
#include "kvcache/registry.hpp"

namespace kvcache::tool {
namespace {

// Validates the file, then its component names and options against what is installed. Prints
// every problem to stderr and the resolved config to stdout. Returns whether it is valid.
bool check(const std::string& file) {
  const Config config = load_config(file, process_environment());  // throws ConfigError
  const auto registry = Registry::load(config.plugins);
  std::vector<Diagnostic> problems = config.warnings;
  const std::vector<Diagnostic> component_problems = check_components(config, *registry);
  problems.insert(problems.end(), component_problems.begin(), component_problems.end());
  bool valid = true;
  for (const Diagnostic& d : problems) {
    std::cerr << to_string(d) << '\n';
    valid = valid && d.severity != Diagnostic::Severity::error;
  }
  if (!valid) return false;
  std::cout << to_yaml(config);
  std::cerr << file << ": valid\n";
  return true;
}

}  // namespace

void add_config_command(CLI::App& app, const Globals&) {
  CLI::App* config = app.add_subcommand("config", "Validate or show configurations");
  config->require_subcommand(1);
  examples(config, {"kvcache config show > my.yaml", "kvcache config check my.yaml"});

  CLI::App* check_cmd = config->add_subcommand(
      "check", "Validate a config file: print its errors (exit 1) or the resolved config (exit 0)");
  auto file = std::make_shared<std::string>();
  check_cmd->add_option("FILE", *file, "YAML config file")->required();
  examples(check_cmd, {"kvcache config check my.yaml",
                       "KVCACHE_CACHE_CAPACITY=8GiB kvcache config check my.yaml"});
  check_cmd->callback([file] {
    if (!check(*file)) throw CLI::RuntimeError(1);
  });

  CLI::App* show = config->add_subcommand("show", "Print the embedded default config");
  show->callback([] { std::cout << default_config_yaml(); });
  examples(show, {"kvcache config show", "kvcache config show > my.yaml"});
}

}  // namespace kvcache::tool
