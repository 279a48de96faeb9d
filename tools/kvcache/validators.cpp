#include "validators.hpp"

#include <charconv>
#include <cmath>
#include <string>

namespace kvcache::tool {

CLI::Validator whole_number(std::uint64_t min, std::uint64_t max) {
  const std::string expected = "expected a whole number from " + std::to_string(min) + " to " +
                               std::to_string(max) + ", got '";
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        std::uint64_t value = 0;
        const char* end = text.data() + text.size();
        const auto [stop, error] = std::from_chars(text.data(), end, value);
        if (error != std::errc{} || stop != end || value < min || value > max)
          return expected + text + "'";
        return {};
      },
      "UINT in [" + std::to_string(min) + " - " + std::to_string(max) + "]");
}

CLI::Validator positive_real() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double value = 0.0;
        const char* end = text.data() + text.size();
        const auto [stop, error] = std::from_chars(text.data(), end, value);
        if (error != std::errc{} || stop != end || !std::isfinite(value) || value <= 0.0)
          return "expected a number greater than 0, got '" + text + "'";
        return {};
      },
      "POSITIVE");
}

}  // namespace kvcache::tool
