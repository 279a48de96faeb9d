// A shared page as a value (docs/remote-tier.md, "Wire format"): a self-describing header, then
// the page's image (CacheStore::export_page). The header says what the bytes are and which
// page they are (fingerprints, parent and own digest, tokens, positions, payload length) and
// carries an XXH3-128 digest of the payload. A reader trusts nothing it did not check: a value
// is used only when every field equals what the reader expects and the payload's digest holds.
//
// Layout, integers little-endian: "KVC1PAGE", u32 wire version, u32 header bytes, the model,
// format, parent and own digests (32 bytes each), u32 page size, u32 zero, u64 page index,
// i32 tokens[page size], i64 positions[page size], u64 payload bytes, 16 bytes of XXH3-128
// (low half first), then the payload.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvcache/export.hpp"
#include "kvcache/host_only.hpp"
#include "kvcache/remote/page_key.hpp"

namespace kvcache::remote {

// Which page a value must be: index `index` of the chain, its tokens, its parent's digest.
struct PageIdentity {
  const KeyChain* chain = nullptr;
  std::uint64_t index = 0;
  Digest parent{};
  Digest self{};
  std::span<const std::int32_t> tokens;  // page_size of them
};

KVCACHE_API std::uint64_t header_bytes(std::uint32_t page_size);

// The value of a page: header and payload.
KVCACHE_API std::vector<std::byte> encode_page(const PageIdentity& page,
                                               std::span<const std::byte> payload);

// The payload of `value` if it is exactly the page expected with a payload of `payload_bytes`;
// otherwise an empty span and `problem` says what did not hold (for the log and the counters).
struct Checked {
  std::span<const std::byte> payload;
  std::string problem;
  bool ok() const { return problem.empty(); }
};
KVCACHE_API Checked check_page(std::span<const std::byte> value, const PageIdentity& expected,
                               std::uint64_t payload_bytes);

}  // namespace kvcache::remote
