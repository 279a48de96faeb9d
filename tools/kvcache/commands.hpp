// The subcommands of the `kvcache` tool. Each registers itself on the CLI11 app and runs when
// chosen; `Globals` holds the options every subcommand shares.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "kvcache/config.hpp"

namespace kvcache::tool {

struct Globals {
  std::string config_file;  // empty: the embedded default
  std::string log_level = "warn";
  // Parse and check the arguments, but do not run the commands that take long or write files
  // (bench, conformance, evaluate, quantize, attention): what the CLI fuzz target sets.
  bool checks_only = false;
};

// The config the user asked for (file or embedded default) with environment overrides.
Config selected_config(const Globals& globals);

void add_plugins_command(CLI::App& app, const Globals& globals);
void add_config_command(CLI::App& app, const Globals& globals);
void add_bench_command(CLI::App& app, const Globals& globals);
void add_plan_command(CLI::App& app, const Globals& globals);
void add_tensor_commands(CLI::App& app, const Globals& globals);
void add_evaluate_command(CLI::App& app, const Globals& globals);
void add_conformance_command(CLI::App& app, const Globals& globals);

// Ends a subcommand's --help with examples, one command line each.
inline void examples(CLI::App* command, std::initializer_list<const char*> lines) {
  std::string footer = "\nExamples:";
  for (const char* line : lines) footer += std::string("\n  ") + line;
  command->footer(footer);
}

// "kvcache: unknown command 'bencj' (did you mean 'bench'?)" when parsing stopped at a word that
// names no subcommand.
std::optional<std::string> unknown_command(const CLI::App& app);

// Sets up spdlog on stderr at the given level ("trace".."off"); throws on an unknown level.
void setup_logging(const std::string& level);

}  // namespace kvcache::tool
