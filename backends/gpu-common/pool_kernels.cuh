// The kernels of the store (part of kernels.cu's translation unit): rows encoded into their
// slots (appends, and kivi-k's whole groups), decoded back (gather), the unused slots of a page
// poisoned, and slots moved between pages (compaction).
#pragma once

#include <cstdint>

#include "kernel_support.hpp"

namespace kvcache::gpu::pool {

// One thread per (row, head, K or V): rows are short and formats with a per-row scale need the
// whole row anyway.
__global__ void encode_kernel(EncodeArgs a) {
  const std::uint64_t t = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const std::uint32_t heads = a.pools.kv_heads, dim = a.pools.head_dim;
  if (t >= a.rows * heads * 2) return;
  const bool value = (t & 1) != 0;
  if ((value ? a.pools.v : a.pools.k).kind == kKiviK) return;  // whole groups: group_encode
  const std::uint64_t row_head = t >> 1, row = row_head / heads;
  const auto head = static_cast<std::uint32_t>(row_head % heads);
  float x[kMaxHeadDim];
  for (std::uint32_t i = 0; i < dim; ++i)
    x[i] = load_input(value ? a.v : a.k, value ? a.v_dtype : a.k_dtype, row_head * dim + i);
  encode_row(value ? a.pools.v : a.pools.k, x, dim,
             a.pools.tile(a.layer, a.row_page[row], head, value), a.row_slot[row]);
}

// Threads over (group, row, head): the group's rows as floats, each rounded through fp16 (as the
// reference store does), whether it waited in the residual or arrives now.
__global__ void group_rows_kernel(GroupEncodeArgs a) {
  const std::uint64_t t = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const DeviceFormat& f = a.value ? a.pools.v : a.pools.k;
  const std::uint32_t heads = a.pools.kv_heads, dim = a.pools.head_dim;
  if (t >= std::uint64_t{a.groups} * f.group * heads) return;
  const auto head = static_cast<std::uint32_t>(t % heads);
  const std::uint64_t group_row = t / heads, group = group_row / f.group, r = group_row % f.group;
  const std::int64_t source = a.source[group_row];
  float* out = a.scratch + ((group * heads + head) * f.group + r) * dim;
  for (std::uint32_t i = 0; i < dim; ++i) {
    out[i] =
        source >= 0
            ? fp16_value(fp16_bits(load_input(
                  a.input, a.dtype, (static_cast<std::uint64_t>(source) * heads + head) * dim + i)))
            : fp16_value(
                  a.residual[(static_cast<std::uint64_t>(-source - 1) * heads + head) * dim + i]);
  }
}

// One thread per (group, head): the group's codes and per-channel scales.
__global__ void group_encode_kernel(GroupEncodeArgs a) {
  const std::uint64_t t = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const DeviceFormat& f = a.value ? a.pools.v : a.pools.k;
  const std::uint32_t heads = a.pools.kv_heads, dim = a.pools.head_dim;
  if (t >= std::uint64_t{a.groups} * heads) return;
  const std::uint64_t group = t / heads;
  const auto head = static_cast<std::uint32_t>(t % heads);
  encode_group(f, a.scratch + t * f.group * dim, dim,
               a.pools.tile(a.layer, a.group_page[group], head, a.value), a.group_slot[group]);
}

__global__ void decode_kernel(DecodeArgs a) {
  const std::uint64_t t = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const std::uint32_t heads = a.pools.kv_heads, dim = a.pools.head_dim;
  if (t >= a.rows * heads * 2) return;
  const bool value = (t & 1) != 0;
  const std::uint64_t row_head = t >> 1, row = row_head / heads;
  const auto head = static_cast<std::uint32_t>(row_head % heads);
  const SlotReader reader(value ? a.pools.v : a.pools.k,
                          a.pools.tile(a.layer, a.row_page[row], head, value), a.row_slot[row]);
  float* out = (value ? a.v : a.k) + row_head * dim;
  for (std::uint32_t i = 0; i < dim; ++i) out[i] = reader[i];
}

// One block per (layer, head, K or V) tile of the page.
__global__ void poison_kernel(PoolLayout p, std::uint32_t page_size, std::uint32_t page,
                              std::uint32_t from_slot) {
  const std::uint32_t tile_index = blockIdx.x;
  const bool value = (tile_index & 1) != 0;
  const std::uint32_t head = (tile_index >> 1) % p.kv_heads, layer = (tile_index >> 1) / p.kv_heads;
  const DeviceFormat& f = value ? p.v : p.k;
  std::uint8_t* tile = p.tile(layer, page, head, value);
  if (from_slot == 0) {
    for (std::uint64_t i = threadIdx.x; i < f.tile_bytes; i += blockDim.x) tile[i] = 0xFF;
    return;
  }
  const std::uint64_t n = page_size - from_slot;
  for (std::uint64_t i = threadIdx.x; i < n * f.slot_code_bytes; i += blockDim.x)
    tile[from_slot * f.slot_code_bytes + i] = 0xFF;
  for (std::uint64_t i = threadIdx.x; i < n * f.slot_meta_bytes; i += blockDim.x)
    tile[f.code_bytes + from_slot * f.slot_meta_bytes + i] = 0xFF;
}

// The address of byte `index` of a slot's bytes across every layer, head, K and V.
__device__ std::uint8_t* slot_byte(const PoolLayout& p, std::uint32_t page, std::uint32_t slot,
                                   std::uint64_t index) {
  const std::uint64_t kb = p.k.slot_code_bytes + p.k.slot_meta_bytes;
  const std::uint64_t vb = p.v.slot_code_bytes + p.v.slot_meta_bytes;
  const std::uint64_t per_layer = p.kv_heads * (kb + vb);
  const auto layer = static_cast<std::uint32_t>(index / per_layer);
  std::uint64_t r = index % per_layer;
  const bool value = r >= p.kv_heads * kb;
  if (value) r -= p.kv_heads * kb;
  const std::uint64_t b = value ? vb : kb;
  const DeviceFormat& f = value ? p.v : p.k;
  std::uint8_t* tile = p.tile(layer, page, static_cast<std::uint32_t>(r / b), value);
  const std::uint64_t offset = r % b;
  return offset < f.slot_code_bytes
             ? tile + std::uint64_t{slot} * f.slot_code_bytes + offset
             : tile + f.code_bytes + std::uint64_t{slot} * f.slot_meta_bytes +
                   (offset - f.slot_code_bytes);
}

// One block per move; `gather` copies sources to scratch, the second launch scratch to targets.
__global__ void move_kernel(SlotMoveArgs a, std::uint64_t bytes, bool gather) {
  const std::uint32_t m = blockIdx.x;
  std::uint8_t* scratch = a.scratch + std::uint64_t{m} * bytes;
  for (std::uint64_t i = threadIdx.x; i < bytes; i += blockDim.x) {
    if (gather)
      scratch[i] = *slot_byte(a.pools, a.from_page[m], a.from_slot[m], i);
    else
      *slot_byte(a.pools, a.to_page[m], a.to_slot[m], i) = scratch[i];
  }
}

}  // namespace kvcache::gpu::pool
