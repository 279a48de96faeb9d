#include "resp_transport.hpp"

#include <cstdlib>

#include <hiredis/hiredis.h>

#include "kvcache/status.hpp"

namespace kvcache::resp {
namespace {

Connection connection_of(const sdk::Options& o) {
  o.only({"endpoints", "connect_timeout_ms", "timeout_ms", "username", "password_env"});
  const nlohmann::json endpoints = o.json().value("endpoints", nlohmann::json::array());
  if (!endpoints.is_array() || endpoints.size() != 1 || !endpoints[0].is_string())
    throw Error(Code::invalid_argument,
                "option 'endpoints': the resp transport takes one endpoint, host:port (a Redis "
                "Cluster is not supported by it yet)");
  std::string password;
  if (o.has("password_env")) {
    const auto name = o.get<std::string>("password_env", "");
    const char* value = std::getenv(name.c_str());
    if (value == nullptr)
      throw Error(Code::invalid_argument,
                  "option 'password_env' names " + name + ", which is not set");
    password = value;
  }
  return Connection(parse_endpoint(endpoints[0].get<std::string>()),
                    std::chrono::milliseconds(o.get<std::uint32_t>("connect_timeout_ms", 100)),
                    std::chrono::milliseconds(o.get<std::uint32_t>("timeout_ms", 1000)),
                    o.get<std::string>("username", ""), std::move(password));
}

// An error reply (a full server, a cluster's redirection, a wrong type) fails the whole call:
// the tier takes it as a miss or a drop.
void check(const Reply& reply, std::string_view verb) {
  if (reply->type == REDIS_REPLY_ERROR)
    throw Error(Code::unavailable,
                std::string(verb) + " answered: " + std::string(reply->str, reply->len));
}

}  // namespace

RespTransport::RespTransport(const sdk::Options& options) : connection_(connection_of(options)) {}

std::vector<Reply> RespTransport::each(std::string_view verb, std::span<const std::string> keys,
                                       std::span<const remote::Value> values,
                                       std::vector<std::string_view> extra) {
  std::vector<std::vector<std::string_view>> commands;
  commands.reserve(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    std::vector<std::string_view> c{verb, keys[i]};
    if (!values.empty())
      c.emplace_back(reinterpret_cast<const char*>(values[i].data()), values[i].size());
    c.insert(c.end(), extra.begin(), extra.end());
    commands.push_back(std::move(c));
  }
  std::lock_guard lock(mutex_);
  std::vector<Reply> replies = connection_.pipeline(commands);
  for (const Reply& r : replies) check(r, verb);
  return replies;
}

std::vector<bool> RespTransport::probe(std::span<const std::string> keys) {
  std::vector<bool> held;
  for (const Reply& r : each("EXISTS", keys))
    held.push_back(r->type == REDIS_REPLY_INTEGER && r->integer > 0);
  return held;
}

std::vector<std::optional<remote::Value>> RespTransport::get(std::span<const std::string> keys) {
  std::vector<std::optional<remote::Value>> values;
  for (const Reply& r : each("GET", keys)) {
    if (r->type != REDIS_REPLY_STRING) {
      values.emplace_back();
      continue;
    }
    const auto* bytes = reinterpret_cast<const std::byte*>(r->str);
    values.emplace_back(remote::Value(bytes, bytes + r->len));
  }
  return values;
}

std::vector<bool> RespTransport::put_if_absent(std::span<const std::string> keys,
                                               std::span<const remote::Value> values) {
  if (keys.size() != values.size())
    throw Error(Code::invalid_argument, "put_if_absent: keys and values differ in number");
  std::vector<bool> stored;
  for (const Reply& r : each("SET", keys, values, {"NX"}))
    stored.push_back(r->type == REDIS_REPLY_STATUS);  // +OK; nil when the key was there
  return stored;
}

void RespTransport::remove(std::span<const std::string> keys) {
  each("UNLINK", keys);
}

std::string RespTransport::describe() const {
  return "resp " + connection_.endpoint().host + ":" + std::to_string(connection_.endpoint().port);
}

}  // namespace kvcache::resp
