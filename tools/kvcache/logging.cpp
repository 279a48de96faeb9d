#include <memory>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "commands.hpp"
#include "kvcache/nearest_name.hpp"
#include "kvcache/status.hpp"

namespace kvcache::tool {

void setup_logging(const std::string& level) {
  const auto parsed = spdlog::level::from_str(level);
  // from_str maps anything unknown to "off"; only the word "off" may mean that.
  if (parsed == spdlog::level::off && level != "off") {
    const std::vector<std::string> levels{"trace", "debug",    "info", "warn",
                                          "error", "critical", "off"};
    throw Error(Code::invalid_argument,
                "unknown log level '" + level + "'" + did_you_mean(level, levels) +
                    "; expected one of trace, debug, info, warn, error, critical, off");
  }
  auto logger = spdlog::stderr_color_mt("kvcache");
  logger->set_pattern("kvcache: %^%l%$: %v");
  logger->set_level(parsed);
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace kvcache::tool
