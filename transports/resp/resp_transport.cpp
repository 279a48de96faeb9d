#include "resp_transport.hpp"

#include <algorithm>
#include <cstdlib>

#include <hiredis/hiredis.h>

#include "kvcache/status.hpp"

namespace kvcache::resp {
namespace {

ConnectionSettings settings_of(const sdk::Options& o) {
  ConnectionSettings s;
  s.connect_timeout = std::chrono::milliseconds(o.get<std::uint32_t>("connect_timeout_ms", 100));
  s.timeout = std::chrono::milliseconds(o.get<std::uint32_t>("timeout_ms", 1000));
  s.username = o.get<std::string>("username", "");
  if (o.has("password_env")) {
    const auto name = o.get<std::string>("password_env", "");
    const char* value = std::getenv(name.c_str());
    if (value == nullptr)
      throw Error(Code::invalid_argument,
                  "option 'password_env' names " + name + ", which is not set");
    s.password = value;
  }
  return s;
}

std::vector<Endpoint> endpoints_of(const sdk::Options& o, bool cluster) {
  const nlohmann::json endpoints = o.json().value("endpoints", nlohmann::json::array());
  if (!endpoints.is_array() || endpoints.empty() || (!cluster && endpoints.size() != 1))
    throw Error(Code::invalid_argument,
                "option 'endpoints': the resp transport takes one endpoint, host:port (a Redis "
                "Cluster's seed nodes, one or more, with cluster: true)");
  return sdk::parse_endpoints(endpoints, kDefaultPort);
}

// An error reply (a full server, a cluster's redirection, a wrong type) fails the whole call:
// the tier takes it as a miss or a drop.
void check(const redisReply& reply, std::string_view verb) {
  if (reply.type == REDIS_REPLY_ERROR)
    throw Error(Code::unavailable,
                std::string(verb) + " answered: " + std::string(reply.str, reply.len));
}

void hand_over(std::size_t index, const redisReply& reply,
               const remote::ByteStore::ValueSink& sink) {
  if (reply.type == REDIS_REPLY_STRING)
    sink(index, {reinterpret_cast<const std::byte*>(reply.str), reply.len});
}

}  // namespace

RespTransport::RespTransport(const sdk::Options& o) {
  o.only({"endpoints", "cluster", "connect_timeout_ms", "timeout_ms", "breaker_ms", "username",
          "password_env"});
  const bool cluster = o.get<bool>("cluster", false);
  const std::vector<Endpoint> endpoints = endpoints_of(o, cluster);
  ConnectionSettings s = settings_of(o);
  if (cluster)
    cluster_ = std::make_unique<Cluster>(
        endpoints, std::move(s),
        std::chrono::milliseconds(o.get<std::uint32_t>("breaker_ms", 1000)));
  else
    connection_ = std::make_unique<Connection>(endpoints[0], s.connect_timeout, s.timeout,
                                               std::move(s.username), std::move(s.password));
}

std::vector<std::vector<std::string_view>> RespTransport::commands(
    std::string_view verb, std::span<const std::string> keys, std::span<const remote::Value> values,
    const std::vector<std::string_view>& extra) {
  std::vector<std::vector<std::string_view>> out;
  out.reserve(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    std::vector<std::string_view> c{verb, keys[i]};
    if (!values.empty())
      c.emplace_back(reinterpret_cast<const char*>(values[i].data()), values[i].size());
    c.insert(c.end(), extra.begin(), extra.end());
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<Reply> RespTransport::each(std::string_view verb, std::span<const std::string> keys,
                                       std::span<const remote::Value> values,
                                       std::vector<std::string_view> extra) {
  const auto pipelined = commands(verb, keys, values, extra);
  std::lock_guard lock(mutex_);
  if (!cluster_) {
    std::vector<Reply> replies = connection_->pipeline(pipelined);
    for (const Reply& r : replies) check(*r, verb);
    return replies;
  }
  std::vector<std::string_view> names(keys.begin(), keys.end());
  std::vector<Reply> replies = cluster_->run(pipelined, names);
  if (!replies.empty() &&
      std::none_of(replies.begin(), replies.end(), [](const Reply& r) { return r != nullptr; }))
    throw Error(Code::unavailable,
                cluster_->describe() + ": no key's node answered " + std::string(verb));
  return replies;
}

std::vector<bool> RespTransport::probe(std::span<const std::string> keys) {
  std::vector<bool> held;
  for (const Reply& r : each("EXISTS", keys))
    held.push_back(r && r->type == REDIS_REPLY_INTEGER && r->integer > 0);
  return held;
}

std::vector<std::optional<remote::Value>> RespTransport::get(std::span<const std::string> keys) {
  return get_through_each(keys);
}

// No copy of the transport's own. From one server, each value straight off the socket as it is
// read (the host verifies and imports it while the next arrives; an error reply fails the call
// after the rest are read, so the connection stays in step); from a cluster, from hiredis's
// replies once every node has answered.
void RespTransport::get_each(std::span<const std::string> keys, const ValueSink& sink) {
  if (cluster_) {
    const std::vector<Reply> replies = each("GET", keys);
    for (std::size_t i = 0; i < replies.size(); ++i)
      if (replies[i]) hand_over(i, *replies[i], sink);
    return;
  }
  const auto pipelined = commands("GET", keys);
  std::optional<Error> refused;
  std::lock_guard lock(mutex_);
  connection_->pipeline_bulk(pipelined, [&](std::size_t i, const BulkReplies::Reply& reply) {
    if (reply.kind == BulkReplies::Kind::error && !refused) {
      refused.emplace(
          Code::unavailable,
          "GET answered: " +
              std::string(reinterpret_cast<const char*>(reply.bytes.data()), reply.bytes.size()));
    } else if (reply.kind == BulkReplies::Kind::value && !refused) {
      sink(i, reply.bytes);
    }
  });
  if (refused) throw *refused;
}

std::vector<bool> RespTransport::put_if_absent(std::span<const std::string> keys,
                                               std::span<const remote::Value> values) {
  if (keys.size() != values.size())
    throw Error(Code::invalid_argument, "put_if_absent: keys and values differ in number");
  std::vector<bool> stored;
  for (const Reply& r : each("SET", keys, values, {"NX"}))
    stored.push_back(r && r->type == REDIS_REPLY_STATUS);  // +OK; nil when the key was there
  return stored;
}

void RespTransport::remove(std::span<const std::string> keys) {
  each("UNLINK", keys);
}

std::string RespTransport::describe() const {
  if (cluster_) return cluster_->describe();
  return "resp " + connection_->endpoint().text();
}

}  // namespace kvcache::resp
