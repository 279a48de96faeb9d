// One K or V tile's slots in the store's format: the reference code of a built-in format
// (kvcache/formats.hpp), or the component's own codec for a format from outside. A tile holds one
// page of one layer and one KV head: [page_size] slot codes, then the slots' (or, for a format
// that groups tokens, the groups') scales.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvcache/formats.hpp"

namespace scalar {

class TileCodec {
 public:
  TileCodec(kvcache::StoreFormat format, std::uint32_t head_dim, std::uint32_t page_size);
  const kvcache::TileLayout& layout() const { return format_.layout; }
  // Tokens encoded together (kivi-k's group); 0 when every slot stands alone.
  std::uint32_t token_group() const {
    return format_.spec.groups_tokens() ? format_.spec.group : 0;
  }

  // One row of head_dim floats into `slot` of `tile`.
  void encode(const float* row, std::byte* tile, std::uint32_t slot) const;
  // token_group() rows from `slot`, the first of their group.
  void encode_group(const float* rows, std::byte* tile, std::uint32_t slot) const;
  void decode(const std::byte* tile, std::uint32_t slot, float* row) const;
  // A slot's codes and scales into another slot (compaction; formats whose slots stand alone).
  void copy_slot(const std::byte* from, std::uint32_t from_slot, std::byte* to,
                 std::uint32_t to_slot) const;

 private:
  // Where a slot's scales (its group's, for a format that groups tokens) start in a tile.
  std::size_t meta_offset(std::uint32_t slot) const {
    return kvcache::slot_meta_offset(format_.spec, format_.layout, dim_, slot);
  }

  kvcache::StoreFormat format_;
  std::uint32_t dim_;
  std::uint32_t page_size_;
};

}  // namespace scalar
