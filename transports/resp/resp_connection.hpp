// One connection to a Redis server (RESP over TCP, through hiredis), made when first used and
// made again after any I/O error: commands are pipelined (all sent, then all replies read), each
// call bounded by the timeouts. Not thread-safe: the transport holds its lock around it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvcache/sdk/endpoints.hpp"

struct redisContext;
struct redisReply;

namespace kvcache::resp {

using sdk::Endpoint;
constexpr int kDefaultPort = 6379;

// A reply, freed with it.
using Reply = std::unique_ptr<redisReply, void (*)(void*)>;

class Connection {
 public:
  // With a password, each connection starts with AUTH (as `username` when one is given: a
  // Redis 6 ACL user).
  Connection(Endpoint endpoint, std::chrono::milliseconds connect_timeout,
             std::chrono::milliseconds timeout, std::string username, std::string password);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // One command per element of `commands` (each a list of arguments), pipelined; a reply each.
  // An I/O failure or timeout drops the connection and throws Error(unavailable); an error reply
  // is returned as it is (the caller decides).
  std::vector<Reply> pipeline(const std::vector<std::vector<std::string_view>>& commands);
  const Endpoint& endpoint() const { return endpoint_; }

 private:
  redisContext* connect();
  [[noreturn]] void fail(const std::string& what);

  Endpoint endpoint_;
  std::chrono::milliseconds connect_timeout_, timeout_;
  std::string username_, password_;
  redisContext* context_ = nullptr;
};

}  // namespace kvcache::resp
