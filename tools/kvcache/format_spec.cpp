#include "format_spec.hpp"

#include <charconv>
#include <cstdint>

#include "kvcache/status.hpp"

namespace kvcache::tool {

ComponentChoice parse_format_spec(std::string_view spec) {
  const std::size_t colon = spec.find(':');
  ComponentChoice choice{.name = std::string(spec.substr(0, colon))};
  const auto fail = [&](const std::string& why) {
    throw Error(Code::invalid_argument, "format spec '" + std::string(spec) + "': " + why +
                                            " (expected NAME or NAME:KEY=VALUE[,KEY=VALUE])");
  };
  if (choice.name.empty()) fail("no format name");
  if (colon == std::string_view::npos) return choice;
  std::string_view rest = spec.substr(colon + 1);
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string_view pair = rest.substr(0, comma);
    const std::size_t equals = pair.find('=');
    if (equals == std::string_view::npos || equals == 0 || equals + 1 == pair.size())
      fail(std::string("'").append(pair).append("' is not KEY=VALUE"));
    const std::string key(pair.substr(0, equals));
    const std::string_view value = pair.substr(equals + 1);
    if (choice.options.contains(key)) fail("option '" + key + "' given twice");
    std::int64_t number = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), number);
    if (ec == std::errc() && end == value.data() + value.size())
      choice.options[key] = number;
    else if (value == "true" || value == "false")
      choice.options[key] = value == "true";
    else
      choice.options[key] = std::string(value);
    if (comma == std::string_view::npos) return choice;
    rest.remove_prefix(comma + 1);
  }
}

}  // namespace kvcache::tool
