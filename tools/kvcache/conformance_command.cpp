// `kvcache conformance`: the store and attention conformance cases against the reference,
// through the real loader, as a support matrix (tools/conformance). Exit 1 on any failure, on a
// plugin named by --plugin that the loader refused, or when no case matched.
#include <unistd.h>

#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "kvcache/nearest_name.hpp"
#include "kvcache/status.hpp"
#include "runner.hpp"

namespace kvcache::tool {
namespace {

struct ConformanceOptions {
  std::string backend;
  std::vector<std::string> plugins;
  std::string format;
  std::string filter = "*";
  bool json = false;
};

void run_conformance(const ConformanceOptions& o, const Globals& globals) {
  conformance::Setup setup;
  setup.plugins = selected_config(globals).plugins;
  for (const std::string& file : o.plugins) setup.plugins.paths.push_back({file, true, {}});
  setup.backend = o.backend;
  setup.format = o.format;
  conformance::configure(std::move(setup));  // before the cases are generated
  const Registry& registry = conformance::registry();
  if (!o.backend.empty() && registry.find(ComponentKind::backend, o.backend) == nullptr)
    throw Error(Code::not_found,
                "no backend '" + o.backend + "'" +
                    did_you_mean(o.backend, registry.names(ComponentKind::backend)) +
                    "; kvcache plugins lists what is installed");
  bool refused = false;
  for (const RejectedPlugin& r : registry.rejected()) {
    for (const std::string& file : o.plugins)
      if (std::filesystem::weakly_canonical(file) == std::filesystem::weakly_canonical(r.file)) {
        std::cerr << "kvcache conformance: " << file << " was refused: " << r.reason << '\n';
        refused = true;
      }
  }
  const std::vector<conformance::CaseResult> results =
      conformance::run({o.filter, !o.json && isatty(STDERR_FILENO) != 0});
  if (o.json) {
    std::cout << conformance::to_json(results).dump(2) << '\n';
  } else {
    conformance::print_matrix(std::cout, results);
  }
  if (results.empty())
    throw Error(Code::not_found, "no conformance case matches '" + o.filter + "'");
  if (refused || conformance::summarize(results).failed > 0) throw CLI::RuntimeError(1);
}

}  // namespace

void add_conformance_command(CLI::App& app, const Globals& globals) {
  auto options = std::make_shared<ConformanceOptions>();
  CLI::App* cmd = app.add_subcommand(
      "conformance",
      "Run the store and attention conformance cases against the reference and print the support "
      "matrix: component x case -> passed / skipped (why) / failed (first mismatch)");
  cmd->add_option("--backend", options->backend, "only this backend (default: every one found)");
  cmd->add_option("--plugin", options->plugins,
                  "a plugin file to load first, e.g. a backend or format built out of tree "
                  "(repeatable)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--format", options->format,
                  "only the cases that store this format (one from outside is run beside the "
                  "built-in ones)");
  cmd->add_option("--filter", options->filter,
                  "cases by GoogleTest name: globs separated by ':', '-' before exclusions")
      ->capture_default_str();
  cmd->add_flag("--json", options->json, "the outcome of every case as JSON, for CI");
  examples(cmd, {"kvcache conformance --backend cpu-tbb --filter '*Prefix*'",
                 "kvcache conformance --plugin build/kvcache-scalar-backend.so --backend scalar",
                 "kvcache conformance --plugin build/kvcache-nf4-format.so --format nf4 --json"});
  cmd->callback([options, &globals] {
    if (!globals.checks_only) run_conformance(*options, globals);
  });
}

}  // namespace kvcache::tool
