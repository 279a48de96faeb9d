// Pieces the conformance cases share: the tag of the component a case tests, a format's
// reference codec, a store or the reason to skip, and deterministic K/V rows.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <dlpack/dlpack.h>
#include <gtest/gtest.h>

#include "kvcache/config.hpp"
#include "kvcache/formats.hpp"
#include "kvcache/host_tensor.hpp"
#include "kvcache/registry.hpp"
#include "setup.hpp"

namespace kvcache::conformance {

// A GoogleTest parameter name made of `text`: every character but letters and digits becomes '_'.
inline std::string test_name(std::string text) {
  std::replace_if(
      text.begin(), text.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); },
      '_');
  return text;
}

// Tags the running case with the component it tests and its formats, for the support matrix
// (report.hpp reads them back as test properties).
inline void record_case(const std::string& backend, const std::string& formats) {
  ::testing::Test::RecordProperty("component", backend);
  ::testing::Test::RecordProperty("formats", formats);
}

// A format's reference codec for one slot's codes and meta: the reference code for a built-in
// format, the component's own encode and decode (of slot 0 of a scratch tile) for any other.
class ReferenceCodec {
 public:
  ReferenceCodec(const StoreSpec& spec, bool value)
      : format_(store_format(with_codecs(spec), value)),
        page_size_(spec.page_size),
        dim_(spec.model.head_dim) {}
  const StoreFormat& format() const { return format_; }

  // One row into a slot's codes and meta.
  void encode(std::span<const float> row, std::byte* codes, std::byte* meta) const {
    if (!format_.external()) return reference::encode(format_.spec, row, codes, meta);
    std::vector<std::byte> tile(format_.layout.tile_bytes);
    std::int64_t shape[2] = {1, dim_};
    format_.codec->encode(host_tensor(row.data(), shape, 2), 0, page_size_, tile.data());
    std::copy_n(tile.begin(), format_.layout.slot_code_bytes, codes);
    std::copy_n(tile.begin() + static_cast<std::ptrdiff_t>(format_.layout.code_bytes),
                format_.layout.slot_meta_bytes, meta);
  }
  void decode(const std::byte* codes, const std::byte* meta, std::span<float> row) const {
    if (!format_.external()) return reference::decode(format_.spec, codes, meta, row);
    std::vector<std::byte> tile(format_.layout.tile_bytes);
    std::copy_n(codes, format_.layout.slot_code_bytes, tile.begin());
    std::copy_n(meta, format_.layout.slot_meta_bytes,
                tile.begin() + static_cast<std::ptrdiff_t>(format_.layout.code_bytes));
    std::int64_t shape[2] = {1, dim_};
    DLTensor out = host_tensor(row.data(), shape, 2);
    format_.codec->decode(tile.data(), 0, page_size_, out);
  }

 private:
  StoreFormat format_;
  std::uint32_t page_size_;
  std::int64_t dim_;
};

#define KVCACHE_OPEN_STORE_OR_SKIP(var, backend_name, spec)          \
  auto var = ::kvcache::conformance::open_store(backend_name, spec); \
  if (!var) GTEST_SKIP() << ::kvcache::conformance::skip_reason(backend_name, spec)

// A deterministic row for (token id, position, layer, head, K or V): equal inputs give equal
// K/V, as in a real model, so prefix sharing is checkable.
inline std::vector<float> row_for(std::int32_t token, Position pos, std::uint32_t layer,
                                  std::uint32_t head, bool value, std::uint32_t dim) {
  std::vector<float> row(dim);
  std::uint64_t h = (static_cast<std::uint64_t>(token) * 0x9E3779B97F4A7C15ull) ^
                    (static_cast<std::uint64_t>(pos) << 20) ^ (std::uint64_t{layer} << 8) ^
                    (std::uint64_t{head} << 2) ^ (value ? 1u : 0u);
  for (std::uint32_t i = 0; i < dim; ++i) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    row[i] = static_cast<float>(static_cast<std::int64_t>(h >> 40) - (1 << 23)) / (1 << 21);
  }
  return row;
}

}  // namespace kvcache::conformance
