// One storage format's kernels on the CPU: encode a K or V row into a slot of a tile, decode it
// back, move a slot. For built-in formats, fast paths (AVX-512 encoders and decoders, AVX2
// encoders, picked at run time) produce exactly the reference's bytes and every other case runs
// the reference code itself; any other format runs its component's own encode and tile decode.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "kernels/row_format.hpp"
#include "kvcache/formats.hpp"
#include "store/row_encoders.hpp"

namespace kvcache::cpu {

class SlotCodec {
 public:
  SlotCodec(const StoreFormat& format, std::uint32_t head_dim, std::uint32_t page_size);

  const FormatSpec& spec() const { return spec_; }
  // The kind in which the kernels read these rows in place: fp16, bf16, fp8, int8 and int4 (in
  // groups of 32, 64 or 128); float32 for every other format (decoded into float32 rows first).
  RowFormat row_kind() const;
  const TileLayout& layout() const { return layout_; }

  // Per-slot formats only.
  void encode(const float* row, std::byte* tile, std::uint32_t slot) const;
  // Makes this thread's encodes visible to other threads (some kernels use streaming stores).
  static void finish_writes();
  // Formats that group tokens (kivi-k): rows[group][head_dim] into the group of `first_slot`.
  void encode_group(const float* rows, std::byte* tile, std::uint32_t first_slot) const;
  void decode(const std::byte* tile, std::uint32_t slot, float* row) const;
  // Decodes n consecutive slots into rows[n][head_dim] (AVX-512 for the common formats), while
  // asking for `ahead_bytes` at `ahead` (the next tile to read) to be brought into cache, spread
  // over the rows rather than in one burst.
  void decode_rows(const std::byte* tile, std::uint32_t first_slot, std::uint32_t n, float* rows,
                   const std::byte* ahead = nullptr, std::size_t ahead_bytes = 0) const;
  // Per-slot formats only.
  void copy_slot(const std::byte* from_tile, std::uint32_t from_slot, std::byte* to_tile,
                 std::uint32_t to_slot) const {
    std::memcpy(codes(to_tile, to_slot), codes(from_tile, from_slot), layout_.slot_code_bytes);
    std::memcpy(meta(to_tile, to_slot), meta(from_tile, from_slot), layout_.slot_meta_bytes);
  }

 private:
  std::byte* codes(std::byte* tile, std::uint32_t slot) const {
    return tile + std::size_t{slot} * layout_.slot_code_bytes;
  }
  const std::byte* codes(const std::byte* tile, std::uint32_t slot) const {
    return tile + std::size_t{slot} * layout_.slot_code_bytes;
  }
  std::byte* meta(std::byte* tile, std::uint32_t slot) const {
    return tile + slot_meta_offset(spec_, layout_, head_dim_, slot);
  }
  const std::byte* meta(const std::byte* tile, std::uint32_t slot) const {
    return tile + slot_meta_offset(spec_, layout_, head_dim_, slot);
  }

  using DecodeFn = void (*)(const std::byte* codes, const std::byte* meta, std::uint32_t head_dim,
                            float* row);
  // rows[shape[0]][head_dim] as the float32 tensor a codec takes.
  DLTensor rows_tensor(const float* rows, std::int64_t* shape) const;

  FormatSpec spec_;
  TileLayout layout_;
  std::uint32_t head_dim_;
  std::uint32_t page_size_;
  std::shared_ptr<const Quantizer> external_;  // an external format's codec, else null
  RowEncoder fast_encode_ = nullptr;           // null: the reference encoder
  bool fast_int4_ = false;          // int4-group's AVX-512 encoder (it takes the group size)
  DecodeFn fast_decode_ = nullptr;  // null: the reference decoder
};

}  // namespace kvcache::cpu
