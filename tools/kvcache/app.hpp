// The whole `kvcache` command line as a library: the app with every subcommand, and one parse
// that turns every error into a message and an exit code. main() is these two calls; the CLI
// fuzz target (tests/fuzz) drives the same app with arbitrary arguments.
#pragma once

#include <memory>

#include <CLI/CLI.hpp>

#include "commands.hpp"

namespace kvcache::tool {

// The app with all subcommands registered; `globals` receives the shared options and must
// outlive the app.
std::unique_ptr<CLI::App> make_app(Globals& globals);

// Parses and runs; returns the process exit code (0, CLI11's codes for usage errors, 1 for
// errors while running). Never lets an exception escape.
int run(CLI::App& app, int argc, const char* const* argv);

}  // namespace kvcache::tool
