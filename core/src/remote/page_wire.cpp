#include "kvcache/remote/page_wire.hpp"

#include <algorithm>
#include <array>
#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvcache::remote {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'C', '1', 'P', 'A', 'G', 'E'};
constexpr std::size_t kDigests = 4 * sizeof(Digest);

using PayloadDigest = std::array<std::uint8_t, 16>;

PayloadDigest payload_digest(std::span<const std::byte> payload) {
  const XXH128_hash_t h = XXH3_128bits(payload.data(), payload.size());
  PayloadDigest d{};
  for (int i = 0; i < 8; ++i) {
    d[i] = static_cast<std::uint8_t>(h.low64 >> (8 * i));
    d[8 + i] = static_cast<std::uint8_t>(h.high64 >> (8 * i));
  }
  return d;
}

class Writer {
 public:
  explicit Writer(std::vector<std::byte>& out) : out_(out) {}
  void raw(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  void u64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<std::byte>(v >> (8 * i)));
  }
  void u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<std::byte>(v >> (8 * i)));
  }

 private:
  std::vector<std::byte>& out_;
};

// The header a page is expected to have, up to (not including) the payload's digest.
std::vector<std::byte> header_start(const PageIdentity& page, std::uint64_t payload_bytes) {
  const std::uint32_t page_size = page.chain->page_size();
  std::vector<std::byte> out;
  out.reserve(header_bytes(page_size));
  Writer w(out);
  w.raw(kMagic, sizeof kMagic);
  w.u32(kWireVersion);
  w.u32(static_cast<std::uint32_t>(header_bytes(page_size)));
  w.raw(page.chain->model().data(), sizeof(Digest));
  w.raw(page.chain->format().data(), sizeof(Digest));
  w.raw(page.parent.data(), sizeof(Digest));
  w.raw(page.self.data(), sizeof(Digest));
  w.u32(page_size);
  w.u32(0);
  w.u64(page.index);
  for (const std::int32_t t : page.tokens) w.u32(static_cast<std::uint32_t>(t));
  for (std::uint32_t slot = 0; slot < page_size; ++slot) w.u64(page.index * page_size + slot);
  w.u64(payload_bytes);
  return out;
}

// Which field of the header starts at byte `at` (for the message of a mismatch).
std::string field_at(std::size_t at, std::uint32_t page_size) {
  const std::size_t tokens = 16 + kDigests + 16;
  const std::pair<std::size_t, const char*> fields[] = {
      {0, "magic"},
      {8, "wire version"},
      {12, "header length"},
      {16, "model fingerprint"},
      {16 + 32, "format fingerprint"},
      {16 + 64, "parent digest"},
      {16 + 96, "page digest"},
      {16 + kDigests, "page size"},
      {16 + kDigests + 8, "page index"},
      {tokens, "token ids"},
      {tokens + 4 * std::size_t{page_size}, "positions"},
      {tokens + 12 * std::size_t{page_size}, "payload length"}};
  const char* name = "header";
  for (const auto& [start, field] : fields)
    if (at >= start) name = field;
  return name;
}

}  // namespace

std::uint64_t header_bytes(std::uint32_t page_size) {
  return 16 + kDigests + 16 + 12 * std::uint64_t{page_size} + 8 + sizeof(PayloadDigest);
}

std::vector<std::byte> encode_page(const PageIdentity& page, std::span<const std::byte> payload) {
  std::vector<std::byte> out = header_start(page, payload.size());
  const PayloadDigest d = payload_digest(payload);
  Writer w(out);
  w.raw(d.data(), d.size());
  w.raw(payload.data(), payload.size());
  return out;
}

Checked check_page(std::span<const std::byte> value, const PageIdentity& expected,
                   std::uint64_t payload_bytes) {
  const std::uint32_t page_size = expected.chain->page_size();
  const std::uint64_t head = header_bytes(page_size);
  if (value.size() != head + payload_bytes)
    return {{},
            "a value of " + std::to_string(value.size()) + " bytes where " +
                std::to_string(head + payload_bytes) + " were expected"};
  const std::vector<std::byte> start = header_start(expected, payload_bytes);
  const auto [mine, theirs] = std::mismatch(start.begin(), start.end(), value.begin());
  if (mine != start.end())
    return {{},
            "its " + field_at(static_cast<std::size_t>(mine - start.begin()), page_size) +
                " differs from this page's"};
  const std::span<const std::byte> payload = value.subspan(head);
  const PayloadDigest d = payload_digest(payload);
  if (std::memcmp(d.data(), value.data() + start.size(), d.size()) != 0)
    return {{}, "its payload does not match its digest"};
  return {payload, {}};
}

}  // namespace kvcache::remote
