// The keys of pages shared across hosts (docs/remote-tier.md, "Keys"). A page's digest is a
// SHA-256 chain over token ids: digest_i = SHA-256(digest_{i-1} || the page's tokens as int32
// little-endian), with digest_{-1} the namespace's root. The root covers everything that gives a
// page's bytes their meaning, so two hosts share a page only when its bytes mean the same there:
// the namespace's secret salt, the model (a user-given identity of the weights, its shape and the
// KV heads held) and the format (K and V formats with their options and tile layouts, page size,
// wire version). The bytes hashed are defined here to the byte: stable across processes, builds
// and hosts.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvcache/cache_store.hpp"
#include "kvcache/export.hpp"
#include "kvcache/host_only.hpp"
#include "kvcache/types.hpp"

namespace kvcache::remote {

using Digest = std::array<std::uint8_t, 32>;

// The version of the value layout (page_wire.hpp): part of the format's fingerprint.
inline constexpr std::uint32_t kWireVersion = 1;

KVCACHE_API Digest sha256(std::span<const std::uint8_t> bytes);
KVCACHE_API std::string hex(std::span<const std::uint8_t> bytes);

// The model's fingerprint: its identity (e.g. "smollm2-135m@<weights sha256>"), shape, and the
// KV heads [kv_begin, kv_end) this cache holds (a tensor-parallel rank holds a part).
KVCACHE_API Digest model_fingerprint(const std::string& identity, const ModelShape& shape,
                                     std::uint32_t kv_begin, std::uint32_t kv_end);

// What a page's bytes are: formats by name and options, their tile layouts, page size.
struct FormatIdentity {
  std::string k_format;
  nlohmann::json k_options = nlohmann::json::object();
  std::string v_format;
  nlohmann::json v_options = nlohmann::json::object();
};
KVCACHE_API Digest format_fingerprint(const FormatIdentity& formats, const StoreInfo& info);

class KVCACHE_API KeyChain {
 public:
  // `label` names the namespace in every key (so that ACLs can separate tenants); `salt` is its
  // secret and enters the root only.
  KeyChain(std::string label, const std::string& salt, const Digest& model, const Digest& format,
           std::uint32_t page_size);

  const Digest& root() const { return root_; }
  const Digest& model() const { return model_; }
  const Digest& format() const { return format_; }
  std::uint32_t page_size() const { return page_size_; }
  // The digests of the first `pages` full pages of token_ids.
  std::vector<Digest> digests(std::span<const std::int32_t> token_ids, std::size_t pages) const;
  Digest next(const Digest& parent, std::span<const std::int32_t> page_tokens) const;
  // "kvc1:<label>:<hex digest>".
  std::string key(const Digest& digest) const;

 private:
  std::string label_;
  Digest model_, format_, root_;
  std::uint32_t page_size_;
};

}  // namespace kvcache::remote
