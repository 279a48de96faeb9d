#include "tile_codec.hpp"

#include <cstring>
#include <span>
#include <utility>

#include "kvcache/host_tensor.hpp"

namespace scalar {

using kvcache::slot_code_offset;

TileCodec::TileCodec(kvcache::StoreFormat format, std::uint32_t head_dim, std::uint32_t page_size)
    : format_(std::move(format)), dim_(head_dim), page_size_(page_size) {}

void TileCodec::encode(const float* row, std::byte* tile, std::uint32_t slot) const {
  if (format_.external()) {
    std::int64_t shape[2] = {1, dim_};
    format_.codec->encode(kvcache::host_tensor(row, shape, 2), slot, page_size_, tile);
    return;
  }
  kvcache::reference::encode(format_.spec, std::span<const float>(row, dim_),
                             tile + slot_code_offset(layout(), slot), tile + meta_offset(slot));
}

void TileCodec::encode_group(const float* rows, std::byte* tile, std::uint32_t slot) const {
  kvcache::reference::encode_group(
      format_.spec, std::span<const float>(rows, std::size_t{token_group()} * dim_), dim_,
      tile + slot_code_offset(layout(), slot), tile + meta_offset(slot));
}

void TileCodec::decode(const std::byte* tile, std::uint32_t slot, float* row) const {
  if (format_.external()) {
    std::int64_t shape[2] = {1, dim_};
    DLTensor out = kvcache::host_tensor(row, shape, 2);
    format_.codec->decode(tile, slot, page_size_, out);
    return;
  }
  kvcache::reference::decode(format_.spec, tile + slot_code_offset(layout(), slot),
                             tile + meta_offset(slot), std::span<float>(row, dim_));
}

void TileCodec::copy_slot(const std::byte* from, std::uint32_t from_slot, std::byte* to,
                          std::uint32_t to_slot) const {
  const kvcache::TileLayout& f = layout();
  std::memmove(to + slot_code_offset(f, to_slot), from + slot_code_offset(f, from_slot),
               f.slot_code_bytes);
  std::memmove(to + f.code_bytes + std::size_t{to_slot} * f.slot_meta_bytes,
               from + f.code_bytes + std::size_t{from_slot} * f.slot_meta_bytes, f.slot_meta_bytes);
}

}  // namespace scalar
