// One connection to a Redis server (RESP over TCP, through hiredis), made when first used and
// made again after any I/O error: commands are pipelined (all sent, then all replies read; GETs
// in groups, see pipeline_bulk), each call bounded by the timeouts. Not thread-safe: the
// transport holds its lock around it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bulk_replies.hpp"
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
  // GETs pipelined, each reply handed to on_reply(index, reply) as soon as it is read, straight
  // off the socket (bulk_replies.hpp), before the next is read: the caller's work on one
  // overlaps the server's sending of the next. If on_reply throws, the connection is dropped
  // (replies are left unread) and the exception goes on.
  static constexpr std::size_t kBulkGroup = 16;  // GETs sent at a time (pipeline_bulk)
  using BulkHandler = std::function<void(std::size_t index, const BulkReplies::Reply& reply)>;
  void pipeline_bulk(const std::vector<std::vector<std::string_view>>& commands,
                     const BulkHandler& on_reply);
  const Endpoint& endpoint() const { return endpoint_; }

 private:
  redisContext* connect();
  // Appends the commands to hiredis's output buffer (sent by the next read or flush).
  redisContext* send(std::span<const std::vector<std::string_view>> commands);
  Reply read_reply(redisContext* c);
  void drop();
  [[noreturn]] void fail(const std::string& what);

  Endpoint endpoint_;
  std::chrono::milliseconds connect_timeout_, timeout_;
  std::string username_, password_;
  redisContext* context_ = nullptr;
};

}  // namespace kvcache::resp
