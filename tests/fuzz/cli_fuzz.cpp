// The command line of every subcommand: the input is the arguments, one per line (at most 64).
// Every argument list either runs or ends with a message and an exit code; nothing may escape
// or crash. Commands that are cheap and only read (plan, config, plugins) run for real; the ones
// that run for minutes or write files are parsed and checked only (Globals::checks_only).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "app.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvcache;
  std::vector<std::string> args = {"kvcache"};
  std::string_view text = fuzz::as_text(data, size);
  while (!text.empty() && args.size() <= 64) {
    const std::size_t end = text.find('\n');
    args.emplace_back(text.substr(0, end));
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
  }
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  tool::Globals globals;
  globals.checks_only = true;
  const auto app = tool::make_app(globals);
  tool::run(*app, static_cast<int>(argv.size()), argv.data());
  return 0;
}
