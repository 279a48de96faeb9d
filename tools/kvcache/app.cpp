// The `kvcache` command line: the app, its subcommands, and the exit codes of its errors.
#include "app.hpp"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "kvcache/config.hpp"
#include "kvcache/nearest_name.hpp"
#include "kvcache/status.hpp"

#ifndef KVCACHE_VERSION
#define KVCACHE_VERSION "unknown"
#endif

namespace kvcache::tool {

Config selected_config(const Globals& globals) {
  const Environment env = process_environment();
  return globals.config_file.empty() ? default_config(env) : load_config(globals.config_file, env);
}

std::optional<std::string> unknown_command(const CLI::App& app) {
  if (!app.get_subcommands().empty()) return std::nullopt;
  const std::vector<std::string> words = app.remaining();
  const auto word = std::find_if(words.begin(), words.end(),
                                 [](const std::string& w) { return !w.empty() && w[0] != '-'; });
  if (word == words.end()) return std::nullopt;
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
  return "kvcache: unknown command '" + *word + "'" + did_you_mean(*word, names) +
         "; kvcache --help lists them";
}

std::unique_ptr<CLI::App> make_app(Globals& globals) {
  auto owned = std::make_unique<CLI::App>("kvcache: paged, quantized KV caches for LLM inference");
  CLI::App& app = *owned;
  app.set_version_flag("--version", std::string("kvcache ") + KVCACHE_VERSION + " (plugin ABI " +
                                        std::to_string(KVC_ABI_MAJOR) + "." +
                                        std::to_string(KVC_ABI_MINOR) + ")");
  app.require_subcommand(1);
  // The global options work after a subcommand too (`kvcache bench --config FILE`): what a
  // subcommand does not know falls through to here. Subcommands inherit this when added.
  app.fallthrough();
  if (const char* level = std::getenv("KVCACHE_LOG_LEVEL")) globals.log_level = level;
  app.add_option("--log-level", globals.log_level,
                 "trace, debug, info, warn, error, critical or off (env KVCACHE_LOG_LEVEL)")
      ->capture_default_str();
  app.add_option("-c,--config", globals.config_file,
                 "config file (YAML); default: the embedded config")
      ->check(CLI::ExistingFile);
  app.parse_complete_callback([&] { setup_logging(globals.log_level); });
  add_plugins_command(app, globals);
  add_config_command(app, globals);
  add_bench_command(app, globals);
  add_plan_command(app, globals);
  add_tensor_commands(app, globals);
  add_evaluate_command(app, globals);
  add_conformance_command(app, globals);
  examples(&app, {"kvcache bench", "kvcache --config my.yaml plugins", "kvcache COMMAND --help"});
  return owned;
}

int run(CLI::App& app, int argc, const char* const* argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (const auto unknown = unknown_command(app)) {
      std::cerr << *unknown << '\n';
      return static_cast<int>(CLI::ExitCodes::ExtrasError);
    }
    return app.exit(e);
  } catch (const ConfigError& e) {
    std::cerr << e.what() << '\n';
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "kvcache: error: " << e.what() << '\n';
    return 1;
  }
  return 0;
}

}  // namespace kvcache::tool
