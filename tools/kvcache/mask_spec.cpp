#include "mask_spec.hpp"

#include <charconv>
#include <vector>

#include "kvcache/status.hpp"

namespace kvcache::tool {
namespace {

std::int64_t number(std::string_view text, std::string_view spec) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0)
    throw Error(Code::invalid_argument, "mask spec '" + std::string(spec) + "': '" +
                                            std::string(text) + "' is not a non-negative integer");
  return value;
}

}  // namespace

ComponentChoice parse_mask_spec(std::string_view spec) {
  std::vector<std::string_view> parts;
  for (std::size_t start = 0;;) {
    const std::size_t colon = spec.find(':', start);
    parts.push_back(spec.substr(start, colon - start));
    if (colon == std::string_view::npos) break;
    start = colon + 1;
  }
  const std::string name(parts[0]);
  const auto expect = [&](std::size_t n, const char* form) {
    if (parts.size() != n)
      throw Error(Code::invalid_argument,
                  "mask spec '" + std::string(spec) + "': expected " + form);
  };
  if (name == "sliding-window") {
    expect(2, "sliding-window:WINDOW");
    return {name, {{"window", number(parts[1], spec)}}};
  }
  if (name == "sink-window") {
    if (parts.size() != 4 || (parts[3] != "cache" && parts[3] != "original"))
      expect(3, "sink-window:SINKS:WINDOW or sink-window:SINKS:WINDOW:cache (or :original)");
    ComponentChoice choice{name,
                           {{"sinks", number(parts[1], spec)}, {"window", number(parts[2], spec)}}};
    if (parts.size() == 4) choice.options["positions"] = std::string(parts[3]);
    return choice;
  }
  if (name == "chunked") {
    expect(2, "chunked:CHUNK");
    return {name, {{"chunk", number(parts[1], spec)}}};
  }
  expect(1, "a mask name, or sliding-window:W, sink-window:S:W[:cache], chunked:C");
  return {name, nlohmann::json::object()};
}

}  // namespace kvcache::tool
