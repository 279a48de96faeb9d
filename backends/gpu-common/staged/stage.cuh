// The staged kernel's tiles (staged_attention.cuh): a tile's layout in shared memory, and the
// asynchronous copies that stage a tile's K or V rows into it while the previous tile is being
// computed.
#pragma once

#include <cstdint>
#include <cstring>

#include "../kernel_support.hpp"

namespace kvcache::gpu::staged {

#if defined(__HIPCC__)
// Two buffers of 64 fp16 rows of 128 fit AMD's 64 KiB per block: two warps of 32, or one of 64.
constexpr std::uint32_t kWarps = 64 / kWarp;
#else
constexpr std::uint32_t kWarps = 4;
#endif
constexpr std::uint32_t kRows = kWarp;  // a tile: one row per lane
// Integer keys (int8, int4) meet queries rounded to int8 in blocks of this many elements, each
// with its own step (the numerics gpu_capabilities declares); scores, when wanted, come from the
// general kernel, which keeps float queries.
constexpr std::uint32_t kQueryBlock = 64;

// A tile of kRows rows of one format at head_dim kDim, as staged in shared memory: codes, then
// each row's metadata (the token's scale, or the groups' (scale, minimum) pairs).
template <std::uint32_t kKind, std::uint32_t kDim>
struct Tile {
  static constexpr std::uint32_t bits = kKind == kFp16 || kKind == kBf16 ? 16
                                        : kKind == kInt4Group            ? 4
                                                                         : 8;
  static constexpr std::uint32_t code_bytes = kDim * bits / 8;
  // Rows lie 16 bytes more than their codes apart, so the 8 lanes of a 128-bit shared load's
  // phase, reading the same 16 bytes of 8 rows, meet 8 different groups of 4 banks.
  static constexpr std::uint32_t stride = code_bytes + 16;
  static constexpr std::uint32_t granules = code_bytes / 16;
  static constexpr std::uint32_t per_granule = 128 / bits;  // elements in 16 bytes
  static constexpr std::uint32_t max_meta = kKind == kInt4Group                ? kDim / 32 * 4
                                            : kKind == kFp16 || kKind == kBf16 ? 0
                                                                               : 4;
  static constexpr std::uint32_t bytes = kRows * (stride + max_meta);
  static constexpr std::uint32_t lane_dims = kDim / kWarp;  // a lane's share of the values
};

// kBytes (1, 2, 4, 8 or 16) bytes of shared memory as words, low bytes first.
template <std::uint32_t kBytes>
KVC_INLINE void load_codes(const std::uint8_t* p, std::uint32_t* w) {
  if constexpr (kBytes >= 4) {
    load_words<kBytes / 4>(p, w);
  } else if constexpr (kBytes == 2) {
    std::uint16_t h;
    std::memcpy(&h, p, 2);
    w[0] = h;
  } else {
    w[0] = *p;
  }
}

// Four floats of shared memory, 16-byte aligned, in one load.
KVC_INLINE void load_floats4(const float* p, float* x) {
#if defined(__CUDACC__) || defined(__HIPCC__)
  const float4 v = *reinterpret_cast<const float4*>(p);
  x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
#else
  std::memcpy(x, p, 16);
#endif
}

// Buffers per warp: at least 2 (a tile's K and V), at most 4.
constexpr std::uint32_t kMinStages = 2, kMaxStages = 4;

// Dynamic shared memory of a block with `stages` buffers per warp.
template <std::uint32_t kHeads, std::uint32_t kKind, std::uint32_t kDim>
constexpr std::uint32_t shared_bytes(std::uint32_t stages) {
  const std::uint32_t staging = kWarps * stages * Tile<kKind, kDim>::bytes;
  const std::uint32_t merge = kWarps * kHeads * (2 + kDim) * 4;
  return staging > merge ? staging : merge;
}

// Waits until at most n (1 to kMaxStages - 1) of this thread's copy groups are in flight.
KVC_INLINE void stage_wait_all_but(std::uint32_t n) {
  if (n <= 1)
    stage_wait<1>();
  else if (n == 2)
    stage_wait<2>();
  else
    stage_wait<3>();
}

// The rows each warp is staging: lane j names row j (null: none), so that the warp's copies of
// a row's 16-byte granules can be spread over all its lanes.
struct RowsInFlight {
  const std::uint8_t* codes[kWarps][kRows];
  const std::uint8_t* meta[kWarps][kRows];
};

// Starts the copies of a tile's K or V rows into `into`, as one group: lane j's row is slot
// `slot` of page `page` (kNoPage: none) of KV head `kv_head` in `pool`.
template <std::uint32_t kKind, std::uint32_t kDim>
KVC_INLINE void stage_rows(const PoolLayout& pools, const DeviceFormat& f, std::uint8_t* pool,
                           std::uint32_t kv_head, std::uint32_t page, std::uint32_t slot,
                           std::uint32_t warp, std::uint32_t lane, RowsInFlight& rows,
                           std::uint8_t* into) {
  using T = Tile<kKind, kDim>;
  sync_warp();  // the warp is done with the rows named last time, and with `into`
  const std::uint8_t* tile = page == kNoPage ? nullptr : pools.tile_in(pool, f, page, kv_head);
  rows.codes[warp][lane] = tile == nullptr ? nullptr : tile + std::size_t{slot} * T::code_bytes;
  rows.meta[warp][lane] =
      tile == nullptr ? nullptr : tile + f.code_bytes + std::size_t{slot} * f.slot_meta_bytes;
  sync_warp();
  for (std::uint32_t i = lane; i < kRows * T::granules; i += kWarp) {
    const std::uint32_t r = i / T::granules, g = i % T::granules;
    if (const std::uint8_t* from = rows.codes[warp][r])
      stage_copy<16>(into + r * T::stride + 16 * g, from + 16 * g);
  }
  const std::uint32_t words = f.slot_meta_bytes / 4;
  for (std::uint32_t i = lane; i < kRows * words; i += kWarp) {
    const std::uint32_t r = i / words, w = i % words;
    if (const std::uint8_t* from = rows.meta[warp][r])
      stage_copy<4>(into + kRows * T::stride + r * T::max_meta + 4 * w, from + 4 * w);
  }
  stage_commit();
}

}  // namespace kvcache::gpu::staged
