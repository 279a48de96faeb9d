// A transport's `endpoints` option: "host:port" strings, the port left out meaning the
// transport's own default. Errors name the endpoint and what was expected.
#pragma once

#include <charconv>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvcache/status.hpp"

namespace kvcache::sdk {

struct Endpoint {
  std::string host;
  int port = 0;
  std::string text() const { return host + ":" + std::to_string(port); }
};

inline Endpoint parse_endpoint(const std::string& text, int default_port) {
  const std::size_t colon = text.rfind(':');
  Endpoint e{text.substr(0, colon), default_port};
  if (colon != std::string::npos) {
    const std::string port = text.substr(colon + 1);
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), e.port);
    if (ec != std::errc() || end != port.data() + port.size() || e.port < 1 || e.port > 65535)
      throw Error(Code::invalid_argument,
                  "endpoint '" + text + "': expected host:port with a port from 1 to 65535");
  }
  if (e.host.empty())
    throw Error(Code::invalid_argument, "endpoint '" + text + "': expected host:port");
  return e;
}

// The endpoints of `list` (the option's JSON: each a string); the caller checks their number.
inline std::vector<Endpoint> parse_endpoints(const nlohmann::json& list, int default_port) {
  std::vector<Endpoint> out;
  for (const nlohmann::json& e : list) {
    if (!e.is_string())
      throw Error(Code::invalid_argument, "option 'endpoints': each is a string, host:port");
    out.push_back(parse_endpoint(e.get<std::string>(), default_port));
  }
  return out;
}

}  // namespace kvcache::sdk
