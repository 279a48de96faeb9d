// Quantizer: a storage format for K or V vectors, and its host encode/decode of one tile.
// The format description is device-independent: a tile means the same bytes on every backend.
#pragma once

#include <cstdint>

#include <dlpack/dlpack.h>

namespace kvcache {

enum class Granularity : std::uint32_t {
  none = 0,        // plain floats, no scale
  token_head = 1,  // one scale per token and head, over head_dim (the seed's int8)
  group = 2,       // one scale (and zero) per group_size elements of head_dim
  channel = 3,     // per channel over group_size tokens (KIVI keys)
};

// Layout of one tile: the page_size tokens of one page, one layer and one KV head. Codes come
// first (code_bytes), then scales and zeros up to tile_bytes. Formats whose slots are
// self-contained give their per-slot sizes (codes at slot * slot_code_bytes, meta at
// code_bytes + slot * slot_meta_bytes); 0 when a slot is not separable.
struct TileLayout {
  std::uint32_t code_bits = 0;
  Granularity granularity = Granularity::none;
  std::uint32_t group_size = 0;
  bool symmetric = true;
  DLDataType scale_dtype{0, 0, 0};  // bits == 0: no scale
  std::uint64_t tile_bytes = 0;
  std::uint64_t code_bytes = 0;
  std::uint32_t slot_code_bytes = 0;
  std::uint32_t slot_meta_bytes = 0;
};

// TileLayout's name before 2026-12-07, kept so that format plugins written against it still
// compile.
using StorageFormat = TileLayout;

class Quantizer {
 public:
  virtual ~Quantizer() = default;
  virtual TileLayout describe(std::uint32_t head_dim, std::uint32_t page_size) const = 0;
  // src: host floats [count, head_dim], stored into slots [first_slot, first_slot + count).
  virtual void encode(const DLTensor& src, std::uint32_t first_slot, std::uint32_t page_size,
                      void* tile) const = 0;
  // dst: host float32 [count, head_dim], read from slots [first_slot, first_slot + count).
  virtual void decode(const void* tile, std::uint32_t first_slot, std::uint32_t page_size,
                      DLTensor& dst) const = 0;
};

}  // namespace kvcache
