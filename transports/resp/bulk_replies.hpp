// The replies of a GET pipeline read straight off the connection's socket. hiredis's reader
// copies each 16 KB read into its buffer, then each value into a reply of its own: two copies of
// every byte on a path that copies are what bound (a pull moves hundreds of MB). Here a value's
// bytes past its header are read, as large as what remains, into one buffer kept between calls,
// which the tier verifies and imports from while the server sends the next.
// RESP2 bulk strings, nil and error replies; anything else is a protocol error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kvcache::resp {

class BulkReplies {
 public:
  enum class Kind { value, nil, error };
  struct Reply {
    Kind kind;
    std::span<const std::byte> bytes;  // a value's bytes, or an error's text; valid until next()
  };

  // Redis refuses strings over 512 MB; a longer length is garbage, not a reason to allocate.
  static constexpr std::uint64_t kLargestValue = std::uint64_t{512} << 20;

  // Reads from `fd`, a blocking socket whose receive timeout bounds each read.
  explicit BulkReplies(int fd) : fd_(fd) {}

  // The next reply. Throws Error(unavailable) on a timeout, a closed connection or a protocol
  // error: the connection is then out of step and must be dropped.
  Reply next();
  // Whether bytes were read past the last reply (a server that sends what was not asked).
  bool pending() const { return begin_ < end_; }

 private:
  std::string line();  // a header line, without its CRLF
  void fill();         // reads into stage_ after what it holds
  // At least a byte and at most `most` (what has arrived), or throws: closed, timed out, failed.
  std::size_t read_some(std::byte* to, std::size_t most);
  void read_into(std::byte* to, std::size_t bytes);  // exactly `bytes`

  int fd_;
  std::vector<std::byte> stage_ = std::vector<std::byte>(std::size_t{64} << 10);
  std::size_t begin_ = 0, end_ = 0;  // what stage_ holds, unread
  std::vector<std::byte> value_;
};

}  // namespace kvcache::resp
