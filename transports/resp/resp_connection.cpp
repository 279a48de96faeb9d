#include "resp_connection.hpp"

#include <sys/time.h>

#include <algorithm>

#include <hiredis/hiredis.h>

#include "kvcache/status.hpp"

namespace kvcache::resp {
namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  return {static_cast<time_t>(ms.count() / 1000),
          static_cast<suseconds_t>(ms.count() % 1000 * 1000)};
}

}  // namespace

Connection::Connection(Endpoint endpoint, std::chrono::milliseconds connect_timeout,
                       std::chrono::milliseconds timeout, std::string username,
                       std::string password)
    : endpoint_(std::move(endpoint)),
      connect_timeout_(connect_timeout),
      timeout_(timeout),
      username_(std::move(username)),
      password_(std::move(password)) {}

Connection::~Connection() {
  if (context_ != nullptr) redisFree(context_);
}

void Connection::drop() {
  if (context_ != nullptr) redisFree(context_);
  context_ = nullptr;  // the next call connects again
}

void Connection::fail(const std::string& what) {
  const std::string why = context_ != nullptr && context_->err != 0 ? context_->errstr : "";
  drop();
  throw Error(Code::unavailable,
              "redis " + endpoint_.text() + ": " + what + (why.empty() ? "" : ": " + why));
}

redisContext* Connection::connect() {
  if (context_ != nullptr) return context_;
  context_ =
      redisConnectWithTimeout(endpoint_.host.c_str(), endpoint_.port, to_timeval(connect_timeout_));
  if (context_ == nullptr) throw Error(Code::out_of_memory, "redis: no memory for a connection");
  if (context_->err != 0) fail("cannot connect");
  if (redisSetTimeout(context_, to_timeval(timeout_)) != REDIS_OK) fail("cannot set the timeout");
  if (!password_.empty()) {
    std::vector<std::string_view> auth{"AUTH"};
    if (!username_.empty()) auth.push_back(username_);
    auth.push_back(password_);
    const std::vector<Reply> replies = pipeline({auth});
    if (replies[0]->type == REDIS_REPLY_ERROR) {
      const std::string why(replies[0]->str, replies[0]->len);
      fail("AUTH refused (" + why + ")");
    }
  }
  return context_;
}

redisContext* Connection::send(std::span<const std::vector<std::string_view>> commands) {
  redisContext* c = connect();
  std::vector<const char*> argv;
  std::vector<std::size_t> lengths;
  for (const std::vector<std::string_view>& command : commands) {
    argv.clear();
    lengths.clear();
    for (const std::string_view a : command) {
      argv.push_back(a.data());
      lengths.push_back(a.size());
    }
    if (redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lengths.data()) !=
        REDIS_OK)
      fail("cannot send");
  }
  return c;
}

Reply Connection::read_reply(redisContext* c) {
  void* reply = nullptr;
  if (redisGetReply(c, &reply) != REDIS_OK || reply == nullptr) fail("no reply");
  return {static_cast<redisReply*>(reply), freeReplyObject};
}

std::vector<Reply> Connection::pipeline(
    const std::vector<std::vector<std::string_view>>& commands) {
  redisContext* c = send(std::span(commands));
  std::vector<Reply> replies;
  replies.reserve(commands.size());
  for (std::size_t i = 0; i < commands.size(); ++i) replies.push_back(read_reply(c));
  return replies;
}

// A server makes the replies of every command it has read before it writes any: GETs of a few
// hundred KB sent all at once would have the reader wait while the server copies MBs of them. So
// they go in groups, one group ahead of the replies being read: the server makes the next
// group's replies while this one's are read.
void Connection::pipeline_bulk(const std::vector<std::vector<std::string_view>>& commands,
                               const BulkHandler& on_reply) {
  redisContext* c = connect();
  // Earlier replies were read whole, so hiredis's reader holds nothing of these.
  if (c->reader->pos < c->reader->len) fail("unread bytes before a pipeline");
  const std::span<const std::vector<std::string_view>> all(commands);
  std::size_t sent = 0;
  const auto send_group = [&] {
    const std::size_t n = std::min(kBulkGroup, all.size() - sent);
    if (n == 0) return;
    send(all.subspan(sent, n));
    for (int done = 0; done == 0;)
      if (redisBufferWrite(c, &done) != REDIS_OK) fail("cannot send");
    sent += n;
  };
  send_group();
  send_group();
  BulkReplies replies(c->fd);
  for (std::size_t i = 0; i < all.size(); ++i) {
    const BulkReplies::Reply reply = [&] {
      try {
        return replies.next();
      } catch (const Error& e) {
        fail(e.what());
      }
    }();
    try {
      on_reply(i, reply);
    } catch (...) {
      drop();
      throw;
    }
    if ((i + 1) % kBulkGroup == 0) send_group();
  }
  if (replies.pending()) fail("bytes past the last reply");
}

}  // namespace kvcache::resp
