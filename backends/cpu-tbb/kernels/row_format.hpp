// The kinds of rows the attention kernels read: float32 rows, or a storage format's rows read in
// place. A format that is none of these is decoded into float32 rows first.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvcache::cpu {

// How key or value rows reach BlockAttention: float32 rows, or stored rows read in place (fp16 or
// bf16 codes; int8 or fp8 E4M3 codes with one float scale per row; int4 codes, two per byte, with
// an fp16 scale and minimum per group of 32, 64 or 128 elements).
enum class RowFormat { float32, float16, bfloat16, fp8, int8, int4_g32, int4_g64, int4_g128 };
// The elements per scale group of int4 rows, 0 for the other kinds.
constexpr std::uint32_t int4_group(RowFormat kind) {
  return kind == RowFormat::int4_g32    ? 32
         : kind == RowFormat::int4_g64  ? 64
         : kind == RowFormat::int4_g128 ? 128
                                        : 0;
}
// The kind of int4 rows in groups of `group` elements (32, 64 or 128; float32 for others: decoded).
constexpr RowFormat int4_rows(std::uint32_t group) {
  return group == 32    ? RowFormat::int4_g32
         : group == 64  ? RowFormat::int4_g64
         : group == 128 ? RowFormat::int4_g128
                        : RowFormat::float32;
}
// The kinds read by integer dot products (keys against a quantized query).
constexpr bool integer_rows(RowFormat kind) {
  return kind == RowFormat::int8 || int4_group(kind) != 0;
}
struct RowBlock {
  RowFormat kind = RowFormat::float32;
  const void* rows = nullptr;  // [n][dim]
  const void* meta = nullptr;  // int8 and int4: [n] rows of scales (and minima)
  // The next tile of these rows, asked for into cache a little at a time during the block.
  const std::byte* ahead = nullptr;
  std::size_t ahead_bytes = 0;
};

}  // namespace kvcache::cpu
