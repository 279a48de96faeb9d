// Paged attention that streams: the kernel for the formats engines use most (fp16, bf16, fp8,
// int8 per token, int4 in groups; K and V alike) at head_dim 64 and 128. Part of kernels.cu's
// translation unit; the general kernel there serves every other shape (fp32, kivi-k and its
// residual rows, other head sizes, K and V in different formats).
//
// The rule: memory is read once, in tiles, by copies that run while the previous tile is being
// computed, and nothing per row crosses lanes.
//  - A work item (query, KV head, up to 8 of its group's query heads, a run of visible slots) is
//    one block of kWarps warps; warp w takes tiles w, w + kWarps, ... of kWarp slots.
//  - Each warp stages its tiles' K rows and V rows into shared memory of its own with
//    asynchronous copies (cp.async on sm_80+), in a ring of 2 to 4 buffers: while one buffer's
//    K or V is computed, the copies of the next ones are in flight. Registers hold no row in
//    flight, so occupancy follows from the arithmetic and the ring's depth.
//  - Scores: lane j owns row j of the tile and computes its whole dot product with each query
//    head (the queries, scaled, wait in shared memory and are read by all lanes at once). The
//    format's per-row or per-group scale is applied once per row or group, not per element.
//    Only the tile's softmax maximum crosses lanes (one reduction per head per tile).
//  - Values: lane j owns head_dim / kWarp output dimensions of every head, and adds each row's
//    weighted values to them: no reduction across lanes until the block's warps combine.
// Each format is a template specialization: no per-element switch.
#pragma once

#include <atomic>
#include <cstdlib>

#include "kernel_support.hpp"
#include "merge_states.cuh"

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

template <std::uint32_t kHeads, std::uint32_t kKind, std::uint32_t kDim>
__global__ void __launch_bounds__(kWarp* kWarps, kHeads <= 4 ? 4 : 2)
    attend_kernel(AttentionArgs a) {
  using T = Tile<kKind, kDim>;
  constexpr std::uint32_t kBlocks32 = kDim / 32;
  __shared__ __align__(16) float qs[kHeads][kDim];  // the item's query heads, scaled
  __shared__ float q_sums[kHeads][kBlocks32];       // int4: the rounded q's sums over 32 elements
  // Integer keys: the queries rounded to int8 per kQueryBlock elements (int4: each 8 as their even,
  // then their odd elements, the order of a word's nibbles split into bytes), and their steps.
  constexpr bool kIntegerKeys = kKind == kInt8PerToken || kKind == kInt4Group;
  __shared__ __align__(16) std::int8_t q8[kHeads][kDim];
  __shared__ float q8_step[kHeads][kDim / kQueryBlock];
  __shared__ __align__(16) float weights[kWarps][kRows][kHeads];  // a tile's softmax weights
  __shared__ const std::uint8_t* row_codes[kWarps][kRows];        // a tile's rows being staged
  __shared__ const std::uint8_t* row_meta[kWarps][kRows];
  __shared__ std::uint32_t tile_page[kWarps][3][kRows], tile_slot[kWarps][3][kRows];
  KVC_DYNAMIC_SHARED(shared);

  const WorkItem it = a.items[blockIdx.x];
  const DeviceFormat kf = a.pools.k, vf = a.pools.v;
  const std::uint32_t warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const std::uint32_t first_head = it.kv_head * (a.q_heads / a.pools.kv_heads) + it.head0;
  for (std::uint32_t i = threadIdx.x; i < kHeads * kDim; i += blockDim.x) {
    const std::uint32_t g = i / kDim, d = i % kDim;
    float x = 0.0f;
    if (g < it.heads)
      x = it.rotation == 0
              ? load_input(a.q, a.q_dtype,
                           (std::uint64_t{it.query} * a.q_heads + first_head + g) * kDim + d)
              : a.turned[(std::uint64_t{it.rotation - 1} * a.q_heads + first_head + g) * kDim + d];
    qs[g][d] = x * a.scale;
  }
  __syncthreads();
  if constexpr (kIntegerKeys) {
    // A warp per block of a head: lane j rounds elements kPerLane * j and the next ones.
    constexpr std::uint32_t kBlocks = kDim / kQueryBlock, kPerLane = kQueryBlock / kWarp;
    constexpr std::uint32_t kGranuleLanes = 32 / kPerLane;  // int4: the lanes of 32 elements
    for (std::uint32_t p = warp; p < kHeads * kBlocks; p += kWarps) {
      const std::uint32_t g = p / kBlocks, first = p % kBlocks * kQueryBlock + kPerLane * lane;
      float x[kPerLane];
      for (std::uint32_t i = 0; i < kPerLane; ++i) x[i] = qs[g][first + i];
      float mine = x[0] < 0 ? -x[0] : x[0];
      for (std::uint32_t i = 1; i < kPerLane; ++i) mine = max_of(mine, x[i] < 0 ? -x[i] : x[i]);
      const float top = warp_max(mine);
      const bool tiny = top < 1.17549435e-38f;  // below the smallest normal float: no steps
      if (lane == 0) q8_step[g][p % kBlocks] = tiny ? 0.0f : top / 127.0f;
      float rounded = 0.0f;
      for (std::uint32_t i = 0; i < kPerLane; ++i) {
        const std::uint32_t e = first + i, k = e % 8;
        const std::uint32_t at = kKind == kInt4Group ? e - k + (k % 2) * 4 + k / 2 : e;
        const std::int32_t code = tiny ? 0 : round_to_int(x[i] * (127.0f / top));
        q8[g][at] = static_cast<std::int8_t>(code);
        rounded += static_cast<float>(code);
      }
      if constexpr (kKind == kInt4Group) {
        // Each kGranuleLanes lanes' elements are one granule: the sum of its rounded q.
        for (std::uint32_t mask = kGranuleLanes / 2; mask > 0; mask /= 2)
          rounded += KVC_SHFL_XOR(rounded, mask);
        if (lane % kGranuleLanes == 0)
          q_sums[g][first / 32] = rounded * (tiny ? 0.0f : top / 127.0f);
      }
    }
    __syncthreads();
  }

  const std::uint32_t depth = a.stages;  // buffers per warp
  std::uint8_t* const buffers = shared + depth * warp * T::bytes;
  std::uint8_t* const k_pool = a.pools.pool(a.layer, false);
  std::uint8_t* const v_pool = a.pools.pool(a.layer, true);
  const std::uint32_t span_begin = a.span_offset[it.query], span_end = a.span_offset[it.query + 1];
  const std::uint32_t* pages = a.pages + a.page_offset[it.query];
  const std::uint64_t end = std::uint64_t{it.first} + it.count;
  const std::uint64_t visible =
      a.logits != nullptr ? a.logit_offset[it.query + 1] - a.logit_offset[it.query] : 0;

  // Where the j-th visible slot is (kNoPage past the item's end).
  const auto locate = [&](std::uint64_t j, std::uint32_t& page, std::uint32_t& slot) {
    page = kNoPage;
    slot = 0;
    if (j >= end) return;
    const auto at = static_cast<std::uint32_t>(visible_slot(a.spans, span_begin, span_end, j));
    page = pages[at / a.page_size];
    slot = at % a.page_size;
  };
  // Starts the copies of a tile's K or V rows (each lane names its row) into `into`, as one group.
  const auto stage = [&](bool value, std::uint32_t page, std::uint32_t slot, std::uint8_t* into) {
    const DeviceFormat& f = value ? vf : kf;
    sync_warp();  // the warp is done with the rows named last time, and with `into`
    const std::uint8_t* tile =
        page == kNoPage ? nullptr : a.pools.tile_in(value ? v_pool : k_pool, f, page, it.kv_head);
    row_codes[warp][lane] = tile == nullptr ? nullptr : tile + std::size_t{slot} * T::code_bytes;
    row_meta[warp][lane] =
        tile == nullptr ? nullptr : tile + f.code_bytes + std::size_t{slot} * f.slot_meta_bytes;
    sync_warp();
    for (std::uint32_t i = lane; i < kRows * T::granules; i += kWarp) {
      const std::uint32_t r = i / T::granules, g = i % T::granules;
      if (const std::uint8_t* from = row_codes[warp][r])
        stage_copy<16>(into + r * T::stride + 16 * g, from + 16 * g);
    }
    const std::uint32_t words = f.slot_meta_bytes / 4;
    for (std::uint32_t i = lane; i < kRows * words; i += kWarp) {
      const std::uint32_t r = i / words, w = i % words;
      if (const std::uint8_t* from = row_meta[warp][r])
        stage_copy<4>(into + kRows * T::stride + r * T::max_meta + 4 * w, from + 4 * w);
    }
    stage_commit();
  };

  float m[kHeads], l[kHeads], acc[kHeads][T::lane_dims], acc_bias[kHeads];
  KVC_UNROLL
  for (std::uint32_t g = 0; g < kHeads; ++g) {
    m[g] = -INFINITY;
    l[g] = acc_bias[g] = 0.0f;
    KVC_UNROLL
    for (std::uint32_t d = 0; d < T::lane_dims; ++d) acc[g][d] = 0.0f;
  }

  // Scores of a tile's keys (at j0, in `buffer`): lane j's row j, whole, with the tile's softmax
  // step. The weights wait in `weights` for the tile's values.
  const auto score_keys = [&](const std::uint8_t* buffer, std::uint32_t page, std::uint64_t j0) {
    float logit[kHeads];
    KVC_UNROLL
    for (std::uint32_t g = 0; g < kHeads; ++g) logit[g] = 0.0f;
    if (page != kNoPage) {
      const std::uint8_t* row = buffer + lane * T::stride;
      const std::uint8_t* meta = buffer + kRows * T::stride + lane * T::max_meta;
      if constexpr (kKind == kInt8PerToken) {
        // Per block of the query: integer dot products of 16 bytes at a time, then its step.
        for (std::uint32_t b = 0; b < kDim / kQueryBlock; ++b) {
          std::int32_t sum[kHeads];
          KVC_UNROLL
          for (std::uint32_t g = 0; g < kHeads; ++g) sum[g] = 0;
          KVC_UNROLL
          for (std::uint32_t c = b * kQueryBlock / 16; c < (b + 1) * kQueryBlock / 16; ++c) {
            std::uint32_t w[4];
            load_words<4>(row + 16 * c, w);
            KVC_UNROLL
            for (std::uint32_t g = 0; g < kHeads; ++g) {
              std::uint32_t q[4];
              load_words<4>(reinterpret_cast<const std::uint8_t*>(&q8[g][16 * c]), q);
              KVC_UNROLL
              for (std::uint32_t i = 0; i < 4; ++i) sum[g] = dot4(w[i], q[i], sum[g]);
            }
          }
          KVC_UNROLL
          for (std::uint32_t g = 0; g < kHeads; ++g)
            logit[g] += static_cast<float>(sum[g]) * q8_step[g][b];
        }
      } else if constexpr (kKind == kInt4Group) {
        // Per granule of 32 (one group): the nibbles split into even and odd bytes, dotted with
        // the query's bytes in that order: scale x step x sum + minimum x sum of the rounded q.
        for (std::uint32_t c = 0; c < T::granules; ++c) {
          std::uint32_t w[4], even[4], odd[4];
          load_words<4>(row + 16 * c, w);
          KVC_UNROLL
          for (std::uint32_t i = 0; i < 4; ++i) {
            even[i] = w[i] & 0x0F0F0F0Fu;
            odd[i] = (w[i] >> 4) & 0x0F0F0F0Fu;
          }
          std::uint32_t pair;
          load_words<1>(meta + 4 * (c * 32 / kf.group), &pair);
          float scale, minimum;
          halves_to_floats(pair, scale, minimum);
          KVC_UNROLL
          for (std::uint32_t g = 0; g < kHeads; ++g) {
            std::uint32_t q[8];
            load_words<4>(reinterpret_cast<const std::uint8_t*>(&q8[g][32 * c]), q);
            load_words<4>(reinterpret_cast<const std::uint8_t*>(&q8[g][32 * c + 16]), q + 4);
            std::int32_t sum = 0;
            KVC_UNROLL
            for (std::uint32_t i = 0; i < 4; ++i)
              sum = dot4(odd[i], q[2 * i + 1], dot4(even[i], q[2 * i], sum));
            logit[g] += static_cast<float>(sum) * (scale * q8_step[g][c * 32 / kQueryBlock]) +
                        minimum * q_sums[g][c];
          }
        }
      } else {
        for (std::uint32_t c = 0; c < T::granules; ++c) {
          std::uint32_t w[4];
          load_words<4>(row + 16 * c, w);
          float x[T::per_granule];
          decode_codes<kKind, T::per_granule>(w, x);
          KVC_UNROLL
          for (std::uint32_t g = 0; g < kHeads; ++g) {
            float part = 0.0f;
            KVC_UNROLL
            for (std::uint32_t e = 0; e < T::per_granule; e += 4) {
              float q[4];
              load_floats4(&qs[g][c * T::per_granule + e], q);
              part += q[0] * x[e] + q[1] * x[e + 1] + q[2] * x[e + 2] + q[3] * x[e + 3];
            }
            logit[g] += part;
          }
        }
      }
      if constexpr (kKind == kInt8PerToken || kKind == kFp8E4M3) {
        std::uint32_t bits;
        load_words<1>(meta, &bits);
        KVC_UNROLL
        for (std::uint32_t g = 0; g < kHeads; ++g) logit[g] *= bits_float(bits);
      }
    }

    // The tile's softmax step: m is the same in every lane; l is summed over lanes at the end.
    KVC_UNROLL
    for (std::uint32_t g = 0; g < kHeads; ++g) {
      if (page == kNoPage) logit[g] = -INFINITY;
      const float tile_top = warp_max(logit[g]);
      const float top = m[g] > tile_top ? m[g] : tile_top;
      const float shrink = weight_of(m[g], top);
      const float p = weight_of(logit[g], top);
      l[g] = l[g] * shrink + p;
      acc_bias[g] *= shrink;
      KVC_UNROLL
      for (std::uint32_t d = 0; d < T::lane_dims; ++d) acc[g][d] *= shrink;
      m[g] = top;
      weights[warp][lane][g] = p;
      if (a.logits != nullptr && g < it.heads && page != kNoPage)
        a.logits[a.logit_offset[it.query] * a.q_heads + (first_head + g) * visible + j0 + lane] =
            logit[g];
    }
  };

  // Values: each lane adds its dimensions of every row of the tile at j0, weighted.
  const auto add_values = [&](const std::uint8_t* buffer, std::uint64_t j0) {
    const std::uint64_t left = end - j0;
    const std::uint32_t rows = left < kRows ? static_cast<std::uint32_t>(left) : kRows;
    constexpr std::uint32_t kLaneBytes = T::lane_dims * T::bits / 8;
    const std::uint32_t d0 = lane * T::lane_dims;
    const std::uint8_t* meta = buffer + kRows * T::stride;
    for (std::uint32_t r = 0; r < rows; ++r) {
      std::uint32_t w[kLaneBytes >= 4 ? kLaneBytes / 4 : 1];
      load_codes<kLaneBytes>(buffer + r * T::stride + d0 * T::bits / 8, w);
      // A lane of one int4 dimension (warps of 64 at head_dim 64) shares its byte: odd lanes
      // take the high nibble.
      if constexpr (kKind == kInt4Group && T::lane_dims == 1) w[0] >>= 4 * (d0 % 2);
      float x[T::lane_dims];
      decode_codes<kKind, T::lane_dims>(w, x);
      float p[kHeads];
      KVC_UNROLL
      for (std::uint32_t g = 0; g < kHeads; g += 4) {
        if constexpr (kHeads >= 4)
          load_floats4(&weights[warp][r][g], p + g);
        else
          p[g] = weights[warp][r][g];
      }
      if constexpr (kKind == kInt8PerToken || kKind == kFp8E4M3) {
        std::uint32_t bits;
        load_words<1>(meta + r * T::max_meta, &bits);
        KVC_UNROLL
        for (std::uint32_t g = 0; g < kHeads; ++g) p[g] *= bits_float(bits);
      } else if constexpr (kKind == kInt4Group) {
        std::uint32_t pair;
        load_words<1>(meta + r * T::max_meta + 4 * (d0 / vf.group), &pair);
        float scale, minimum;
        halves_to_floats(pair, scale, minimum);
        KVC_UNROLL
        for (std::uint32_t g = 0; g < kHeads; ++g) {
          acc_bias[g] += p[g] * minimum;
          p[g] *= scale;
        }
      }
      KVC_UNROLL
      for (std::uint32_t g = 0; g < kHeads; ++g) {
        KVC_UNROLL
        for (std::uint32_t d = 0; d < T::lane_dims; ++d) acc[g][d] += p[g] * x[d];
      }
    }
  };

  // Loads n = 0, 1, 2, ... are tile n / 2's K (n even) or V (n odd), into buffer n % depth: while
  // one is computed, the next depth - 1 are in flight. A tile's rows are found (a span walk and a
  // page-table read) a tile ahead and kept in tile_page/tile_slot, ring of 3: the most tiles that
  // 4 buffers touch.
  constexpr std::uint64_t kStride = std::uint64_t{kWarps} * kRows;
  const std::uint64_t j_first = it.first + std::uint64_t{warp} * kRows;
  const std::uint64_t tiles = j_first < end ? (end - j_first + kStride - 1) / kStride : 0;
  std::uint32_t next_page, next_slot;  // of the next tile whose K is not staged yet
  locate(j_first + lane, next_page, next_slot);
  const auto issue = [&](std::uint64_t n) {
    const std::uint64_t t = n / 2;
    if (t >= tiles) {
      stage_commit();  // an empty group, so that every wait means the same
      return;
    }
    if (n % 2 == 0) {
      tile_page[warp][t % 3][lane] = next_page;
      tile_slot[warp][t % 3][lane] = next_slot;
      locate(j_first + (t + 1) * kStride + lane, next_page, next_slot);
    }
    stage(n % 2 == 1, tile_page[warp][t % 3][lane], tile_slot[warp][t % 3][lane],
          buffers + n % depth * T::bytes);
  };
  for (std::uint32_t n = 0; n < depth; ++n) issue(n);
  for (std::uint64_t n = 0; n < 2 * tiles; ++n) {
    stage_wait_all_but(depth - 1);  // load n has arrived
    sync_warp();
    const std::uint64_t j0 = j_first + n / 2 * kStride;
    const std::uint32_t page = tile_page[warp][n / 2 % 3][lane];
    std::uint8_t* const buffer = buffers + n % depth * T::bytes;
    if (n % 2 == 0) {
      score_keys(buffer, page, j0);
    } else {
      add_values(buffer, j0);
    }
    issue(n + depth);  // into the buffer just read
  }

  // The block's warps combine their states through the staging memory, now idle.
  stage_wait<0>();
  KVC_UNROLL
  for (std::uint32_t g = 0; g < kHeads; ++g) l[g] = warp_sum(l[g]);
  __syncthreads();
  float* const merge_m = reinterpret_cast<float*>(shared);
  float* const merge_l = merge_m + kWarps * kHeads;
  float* const merge_acc = merge_l + kWarps * kHeads;
  KVC_UNROLL
  for (std::uint32_t g = 0; g < kHeads; ++g) {
    if (lane == 0) {
      merge_m[warp * kHeads + g] = m[g];
      merge_l[warp * kHeads + g] = l[g];
    }
    KVC_UNROLL
    for (std::uint32_t d = 0; d < T::lane_dims; ++d)
      merge_acc[(warp * kHeads + g) * kDim + lane * T::lane_dims + d] = acc[g][d] + acc_bias[g];
  }
  __syncthreads();
  // (It reads the warps' states before a barrier, and only then writes its scratch there.)
  merge::write_item_state<kWarp * kWarps>(a, it, merge_m, merge_l, merge_acc, kWarps, kHeads,
                                          shared);
}

// Buffers per warp unless KVCACHE_GPU_STAGES says otherwise: 2, the depth measured on an H200
// (docs/performance.md); 3 and 4 pass the same tests and wait for their measurement.
constexpr std::uint32_t kDefaultStages = 2;

// Launches the kernel for this shape with `stages` buffers per warp (0: the format's default),
// first letting it the shared memory that takes on the current device where it has not yet.
template <std::uint32_t kHeads, std::uint32_t kKind, std::uint32_t kDim>
bool launch_shape(AttentionArgs a, std::uint32_t stages, GPU(Stream_t) stream) {
  using T = Tile<kKind, kDim>;
  const DeviceFormat& k = a.pools.k;
  if (k.slot_code_bytes != T::code_bytes || k.slot_meta_bytes > T::max_meta ||
      k.slot_meta_bytes % 4 != 0 || (kKind == kInt4Group && k.group % 32 != 0))
    return false;
  a.stages = stages != 0 ? stages : kDefaultStages;
  const auto kernel = attend_kernel<kHeads, kKind, kDim>;
  const std::uint32_t bytes = shared_bytes<kHeads, kKind, kDim>(a.stages);
  static_assert(sizeof(merge::Scratch<kWarp * kWarps>) <= kWarps * kMinStages * T::bytes,
                "the merge's scratch fits in the staging buffers");
  static std::atomic<std::uint32_t> allowed[64] = {};  // per device: the most asked for yet
  int device = 0;
  check(GPU(GetDevice)(&device), "read the current device");
  std::atomic<std::uint32_t>& mine = allowed[device % 64];
  if (bytes > mine.load(std::memory_order_relaxed)) {
    allow_shared(kernel, bytes);
    mine.store(bytes, std::memory_order_relaxed);
  }
  KVC_LAUNCH_SHARED(kernel, dim3(a.n_items), dim3(kWarp * kWarps), bytes, stream)(a);
  return true;
}

template <std::uint32_t kHeads, std::uint32_t kDim>
bool launch_dim(const AttentionArgs& a, std::uint32_t stages, GPU(Stream_t) stream) {
  switch (a.pools.k.kind) {
    case kFp16:
      return launch_shape<kHeads, kFp16, kDim>(a, stages, stream);
    case kBf16:
      return launch_shape<kHeads, kBf16, kDim>(a, stages, stream);
    case kFp8E4M3:
      return launch_shape<kHeads, kFp8E4M3, kDim>(a, stages, stream);
    case kInt8PerToken:
      return launch_shape<kHeads, kInt8PerToken, kDim>(a, stages, stream);
    case kInt4Group:
      return launch_shape<kHeads, kInt4Group, kDim>(a, stages, stream);
    default:
      return false;
  }
}

template <std::uint32_t kHeads>
bool launch_heads(const AttentionArgs& a, std::uint32_t stages, GPU(Stream_t) stream) {
  switch (a.pools.head_dim) {
    case 64:
      return launch_dim<kHeads, 64>(a, stages, stream);
    case 128:
      return launch_dim<kHeads, 128>(a, stages, stream);
    default:
      return false;
  }
}

// Runs the staged kernel when the shape is one of its own; false (nothing launched) otherwise.
inline bool launch(const AttentionArgs& a, std::uint32_t item_heads, GPU(Stream_t) stream) {
  const DeviceFormat &k = a.pools.k, &v = a.pools.v;
  if (a.held_from != nullptr || k.kind != v.kind || k.group != v.group ||
      k.slot_meta_bytes != v.slot_meta_bytes ||
      (a.logits != nullptr && (k.kind == kInt8PerToken || k.kind == kInt4Group)))
    return false;
  // KVCACHE_GPU_STAGES=2..4 sets the buffers per warp of every format (for measurements).
  static const std::uint32_t stages = [] {
    const char* text = std::getenv("KVCACHE_GPU_STAGES");
    const int n = text != nullptr ? std::atoi(text) : 0;
    return n >= static_cast<int>(kMinStages) && n <= static_cast<int>(kMaxStages)
               ? static_cast<std::uint32_t>(n)
               : 0u;
  }();
  if (item_heads <= 1) return launch_heads<1>(a, stages, stream);
  if (item_heads <= 4) return launch_heads<4>(a, stages, stream);
  return launch_heads<8>(a, stages, stream);
}

}  // namespace kvcache::gpu::staged
