// The subcommands of the `kvcache` tool. Each registers itself on the CLI11 app and runs when
// chosen; `Globals` holds the options every subcommand shares.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "kvcache/config.hpp"

namespace kvcache::tool {

struct Globals {
  std::string config_file;  // empty: the embedded default
  std::string log_level = "warn";
};

// The config the user asked for (file or embedded default) with environment overrides.
Config selected_config(const Globals& globals);

void add_plugins_command(CLI::App& app, const Globals& globals);
void add_config_command(CLI::App& app, const Globals& globals);
void add_bench_command(CLI::App& app, const Globals& globals);
void add_plan_command(CLI::App& app);
void add_tensor_commands(CLI::App& app, const Globals& globals);
void add_evaluate_command(CLI::App& app, const Globals& globals);
void add_conformance_command(CLI::App& app, const Globals& globals);

// Sets up spdlog on stderr at the given level ("trace".."off"); throws on an unknown level.
void setup_logging(const std::string& level);

}  // namespace kvcache::tool
