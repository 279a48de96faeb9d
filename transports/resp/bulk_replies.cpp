#include "bulk_replies.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "kvcache/status.hpp"

namespace kvcache::resp {
namespace {

[[noreturn]] void protocol(const std::string& what) {
  throw Error(Code::unavailable, "protocol error: " + what);
}

}  // namespace

std::size_t BulkReplies::read_some(std::byte* to, std::size_t most) {
  for (;;) {
    const ssize_t got = ::read(fd_, to, most);
    if (got > 0) return static_cast<std::size_t>(got);
    if (got == 0) throw Error(Code::unavailable, "the server closed the connection");
    if (errno == EAGAIN || errno == EWOULDBLOCK) throw Error(Code::unavailable, "timed out");
    if (errno != EINTR)
      throw Error(Code::unavailable, std::string("cannot read: ") + std::strerror(errno));
  }
}

void BulkReplies::read_into(std::byte* to, std::size_t bytes) {
  while (bytes > 0) {
    const std::size_t got = read_some(to, bytes);
    to += got;
    bytes -= got;
  }
}

void BulkReplies::fill() {
  if (begin_ == end_) begin_ = end_ = 0;
  if (end_ == stage_.size()) {
    if (begin_ == 0) protocol("a header line longer than " + std::to_string(stage_.size()));
    std::copy(stage_.begin() + static_cast<std::ptrdiff_t>(begin_),
              stage_.begin() + static_cast<std::ptrdiff_t>(end_), stage_.begin());
    end_ -= begin_;
    begin_ = 0;
  }
  // One read of what has arrived (at least a byte): header lines are short, values come after.
  end_ += read_some(stage_.data() + end_, stage_.size() - end_);
}

std::string BulkReplies::line() {
  for (std::size_t scanned = begin_;;) {
    for (; scanned + 1 < end_; ++scanned)
      if (stage_[scanned] == std::byte{'\r'} && stage_[scanned + 1] == std::byte{'\n'}) {
        std::string text(reinterpret_cast<const char*>(stage_.data() + begin_), scanned - begin_);
        begin_ = scanned + 2;
        return text;
      }
    const std::size_t offset = scanned - begin_;
    fill();
    scanned = begin_ + offset;
  }
}

BulkReplies::Reply BulkReplies::next() {
  const std::string header = line();
  if (header.empty()) protocol("an empty reply");
  if (header[0] == '-') {
    value_.assign(reinterpret_cast<const std::byte*>(header.data() + 1),
                  reinterpret_cast<const std::byte*>(header.data() + header.size()));
    return {Kind::error, value_};
  }
  if (header[0] != '$') protocol("a GET answered '" + header.substr(0, 40) + "'");
  if (header == "$-1") return {Kind::nil, {}};
  std::uint64_t length = 0;
  const char* end = header.data() + header.size();
  const auto [at, ec] = std::from_chars(header.data() + 1, end, length);
  if (ec != std::errc() || at != end || length > kLargestValue)
    protocol("a bulk length of '" + header.substr(1, 40) + "'");
  // The value and its CRLF: first what the stage holds, then the rest read in place.
  value_.resize(length + 2);
  const std::size_t staged = std::min<std::size_t>(end_ - begin_, length + 2);
  std::copy_n(stage_.begin() + static_cast<std::ptrdiff_t>(begin_), staged, value_.begin());
  begin_ += staged;
  read_into(value_.data() + staged, length + 2 - staged);
  if (value_[length] != std::byte{'\r'} || value_[length + 1] != std::byte{'\n'})
    protocol("a value not followed by CRLF");
  return {Kind::value, std::span<const std::byte>(value_).first(length)};
}

}  // namespace kvcache::resp
