// The resp transport's reader of GET replies, on a socket pair: every split of the bytes
// across reads gives the same replies; anything but a bulk string, nil or an error is refused;
// a closed or silent server is an error, never a short value.
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "bulk_replies.hpp"
#include "kvcache/status.hpp"

namespace kvcache::resp {
namespace {

using Kind = BulkReplies::Kind;

class SocketPair {
 public:
  SocketPair() {
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds_) != 0) throw std::runtime_error("socketpair");
    const timeval timeout{0, 200'000};
    ::setsockopt(fds_[0], SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  }
  ~SocketPair() {
    ::close(fds_[0]);
    close_writer();
  }
  int reader() const { return fds_[0]; }
  // Writes `bytes` in pieces of 1 to `largest` bytes (seeded), from a thread of its own.
  std::thread write(std::string bytes, std::size_t largest, unsigned seed) {
    return std::thread([this, bytes = std::move(bytes), largest, seed] {
      std::mt19937 random(seed);
      for (std::size_t at = 0; at < bytes.size();) {
        const std::size_t n = std::min(bytes.size() - at, 1 + random() % largest);
        const ssize_t sent = ::send(fds_[1], bytes.data() + at, n, MSG_NOSIGNAL);
        if (sent <= 0) return;
        at += static_cast<std::size_t>(sent);
      }
    });
  }
  void close_writer() {
    if (fds_[1] >= 0) ::close(fds_[1]);
    fds_[1] = -1;
  }

 private:
  int fds_[2] = {-1, -1};
};

std::string bulk(const std::string& value) {
  std::string out = "$";
  out.append(std::to_string(value.size())).append("\r\n").append(value).append("\r\n");
  return out;
}

std::string text(const BulkReplies::Reply& r) {
  return {reinterpret_cast<const char*>(r.bytes.data()), r.bytes.size()};
}

std::string pattern(std::size_t n, char seed) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>(seed + i * 7 + i / 251);
  return s;
}

TEST(BulkReplies, EverySplitOfTheBytesGivesTheSameReplies) {
  // Values around the stage's 64 KB and a value holding CRLF and '$' of its own; the large
  // ones in reads of up to 70,000 bytes only (a byte a read would take seconds).
  const std::vector<std::string> small = {"", "x", "a\r\n$5\r\nfake\r\n", pattern(65535, 'a'),
                                          pattern(65536, 'b')};
  std::vector<std::string> large = small;
  large.push_back(pattern(369016, 'c'));
  large.push_back(pattern(1 << 20, 'd'));
  for (const std::size_t largest : {std::size_t{1}, std::size_t{7}, std::size_t{70000}}) {
    const std::vector<std::string>& values = largest < 70000 ? small : large;
    std::string wire;
    for (const std::string& v : values) wire.append(bulk(v)).append("$-1\r\n");
    wire.append("-ERR wrong kind of value\r\n");
    SocketPair pair;
    std::thread writer = pair.write(wire, largest, static_cast<unsigned>(largest));
    BulkReplies replies(pair.reader());
    for (const std::string& v : values) {
      const BulkReplies::Reply value = replies.next();
      ASSERT_EQ(value.kind, Kind::value);
      EXPECT_EQ(text(value), v) << "a value of " << v.size() << " bytes, reads of <= " << largest;
      EXPECT_EQ(replies.next().kind, Kind::nil);
    }
    const BulkReplies::Reply error = replies.next();
    EXPECT_EQ(error.kind, Kind::error);
    EXPECT_EQ(text(error), "ERR wrong kind of value");
    EXPECT_FALSE(replies.pending());
    writer.join();
  }
}

// The next reply is Error(unavailable) whose message holds `words`.
void expect_error(BulkReplies& replies, const std::string& words, const std::string& wire) {
  try {
    replies.next();
    ADD_FAILURE() << "accepted " << wire;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::unavailable) << wire;
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(BulkReplies, RefusesWhatAGetDoesNotAnswer) {
  for (const std::string wire : {"+OK\r\n", ":1\r\n", "*2\r\n", "$abc\r\n", "$-2\r\n", "$12x\r\n",
                                 "$99999999999999\r\n", "$3\r\nabcd\r\n", "\r\n"}) {
    SocketPair pair;
    pair.write(wire, 64, 1).join();
    BulkReplies replies(pair.reader());
    expect_error(replies, "protocol error", wire);
  }
}

TEST(BulkReplies, AServerThatClosesOrFallsSilentIsAnErrorNotAShortValue) {
  const std::string half = "$10\r\nhalf";
  {
    SocketPair pair;
    pair.write(half, 64, 1).join();
    pair.close_writer();
    BulkReplies replies(pair.reader());
    expect_error(replies, "closed", half);
  }
  {
    SocketPair pair;  // a receive timeout of 200 ms
    pair.write(half, 64, 1).join();
    BulkReplies replies(pair.reader());
    expect_error(replies, "timed out", half);
  }
}

TEST(BulkReplies, SaysWhenBytesCameAfterTheLastReply) {
  SocketPair pair;
  pair.write(bulk("v").append("$1\r\nw"), 64, 1).join();
  BulkReplies replies(pair.reader());
  EXPECT_EQ(text(replies.next()), "v");
  EXPECT_TRUE(replies.pending());
}

}  // namespace
}  // namespace kvcache::resp
