#include "kvcache/remote/page_key.hpp"

#include <openssl/evp.h>

#include "kvcache/status.hpp"

namespace kvcache::remote {
namespace {

// Bytes in a defined order: integers little-endian, strings length-prefixed (so that no two
// different inputs concatenate alike).
class Bytes {
 public:
  Bytes& u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) bytes_.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
    return *this;
  }
  Bytes& u64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) bytes_.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
    return *this;
  }
  Bytes& text(const std::string& s) {
    u64(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& digest(const Digest& d) {
    bytes_.insert(bytes_.end(), d.begin(), d.end());
    return *this;
  }
  Bytes& layout(const TileLayout& f) {
    return u32(f.code_bits)
        .u32(static_cast<std::uint32_t>(f.granularity))
        .u32(f.group_size)
        .u32(f.symmetric ? 1 : 0)
        .u32(f.scale_dtype.code)
        .u32(f.scale_dtype.bits)
        .u64(f.tile_bytes)
        .u64(f.code_bytes)
        .u32(f.slot_code_bytes)
        .u32(f.slot_meta_bytes);
  }
  Digest sha256() const { return remote::sha256(bytes_); }

 private:
  std::vector<std::uint8_t> bytes_;
};

}  // namespace

Digest sha256(std::span<const std::uint8_t> bytes) {
  Digest d{};
  unsigned int n = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), d.data(), &n, EVP_sha256(), nullptr) != 1 ||
      n != d.size())
    throw Error(Code::internal, "SHA-256 failed (OpenSSL)");
  return d;
}

std::string hex(std::span<const std::uint8_t> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (const std::uint8_t b : bytes) {
    s.push_back(digits[b >> 4]);
    s.push_back(digits[b & 15]);
  }
  return s;
}

Digest model_fingerprint(const std::string& identity, const ModelShape& shape,
                         std::uint32_t kv_begin, std::uint32_t kv_end) {
  return Bytes{}
      .text("kvc-model-v1")
      .text(identity)
      .u32(shape.layers)
      .u32(shape.q_heads)
      .u32(shape.kv_heads)
      .u32(shape.head_dim)
      .u32(kv_begin)
      .u32(kv_end)
      .sha256();
}

Digest format_fingerprint(const FormatIdentity& formats, const StoreInfo& info) {
  // dump() of nlohmann's default (ordered by key) object is canonical.
  return Bytes{}
      .text("kvc-format-v1")
      .u32(kWireVersion)
      .text(formats.k_format)
      .text(formats.k_options.dump())
      .layout(info.k_format)
      .text(formats.v_format)
      .text(formats.v_options.dump())
      .layout(info.v_format)
      .u32(info.page_size)
      .sha256();
}

KeyChain::KeyChain(std::string label, const std::string& salt, const Digest& model,
                   const Digest& format, std::uint32_t page_size)
    : label_(std::move(label)), model_(model), format_(format), page_size_(page_size) {
  root_ =
      Bytes{}.text("kvc-page-v1").text(salt).digest(model).digest(format).u32(page_size).sha256();
}

Digest KeyChain::next(const Digest& parent, std::span<const std::int32_t> page_tokens) const {
  Bytes b;
  b.digest(parent);
  for (const std::int32_t t : page_tokens) b.u32(static_cast<std::uint32_t>(t));
  return b.sha256();
}

std::vector<Digest> KeyChain::digests(std::span<const std::int32_t> token_ids,
                                      std::size_t pages) const {
  std::vector<Digest> out;
  out.reserve(pages);
  Digest parent = root_;
  for (std::size_t i = 0; i < pages && (i + 1) * page_size_ <= token_ids.size(); ++i) {
    parent = next(parent, token_ids.subspan(i * page_size_, page_size_));
    out.push_back(parent);
  }
  return out;
}

std::string KeyChain::key(const Digest& digest) const {
  return "kvc1:" + label_ + ":" + hex(digest);
}

}  // namespace kvcache::remote
