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
#include "staged/combine.cuh"
#include "staged/queries.cuh"
#include "staged/score.cuh"
#include "staged/softmax.cuh"
#include "staged/stage.cuh"
#include "staged/values.cuh"

namespace kvcache::gpu::staged {

// The stages, as FlashInfer's decode.cuh has them: the queries (queries.cuh), then per tile the
// staged copies (stage.cuh), the scores (score.cuh) and softmax step (softmax.cuh) of its K, the
// sum of its V (values.cuh); at the end the warps combine (combine.cuh).
template <std::uint32_t kHeads, std::uint32_t kKind, std::uint32_t kDim>
__global__ void __launch_bounds__(kWarp* kWarps, kHeads <= 4 ? 4 : 2)
    attend_kernel(AttentionArgs a) {
  using T = Tile<kKind, kDim>;
  __shared__ Queries<kHeads, kKind, kDim> queries;
  __shared__ __align__(16) float weights[kWarps][kRows][kHeads];  // a tile's softmax weights
  __shared__ RowsInFlight rows_in_flight;
  __shared__ std::uint32_t tile_page[kWarps][3][kRows], tile_slot[kWarps][3][kRows];
  KVC_DYNAMIC_SHARED(shared);

  const WorkItem it = a.items[blockIdx.x];
  const DeviceFormat kf = a.pools.k, vf = a.pools.v;
  const std::uint32_t warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const std::uint32_t first_head = it.kv_head * (a.q_heads / a.pools.kv_heads) + it.head0;
  scale_queries(a, it, first_head, queries);
  __syncthreads();
  if constexpr (Queries<kHeads, kKind, kDim>::integer_keys) {
    round_queries(warp, lane, queries);
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

  SoftmaxState<kHeads, T::lane_dims> state;
  state.clear();

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
    const bool value = n % 2 == 1;
    stage_rows<kKind, kDim>(a.pools, value ? vf : kf, value ? v_pool : k_pool, it.kv_head,
                            tile_page[warp][t % 3][lane], tile_slot[warp][t % 3][lane], warp, lane,
                            rows_in_flight, buffers + n % depth * T::bytes);
  };
  for (std::uint32_t n = 0; n < depth; ++n) issue(n);
  for (std::uint64_t n = 0; n < 2 * tiles; ++n) {
    stage_wait_all_but(depth - 1);  // load n has arrived
    sync_warp();
    const std::uint64_t j0 = j_first + n / 2 * kStride;
    const std::uint32_t page = tile_page[warp][n / 2 % 3][lane];
    const std::uint8_t* const buffer = buffers + n % depth * T::bytes;
    if (n % 2 == 0) {  // K: lane j's row j, then the tile's softmax step
      float logit[kHeads] = {};
      if (page != kNoPage) {
        score_row(queries, buffer + lane * T::stride,
                  buffer + kRows * T::stride + lane * T::max_meta, kf.group, logit);
        if (a.logits != nullptr) {
          KVC_UNROLL
          for (std::uint32_t g = 0; g < kHeads; ++g)
            if (g < it.heads)
              a.logits[a.logit_offset[it.query] * a.q_heads + (first_head + g) * visible + j0 +
                       lane] = logit[g];
        }
      }
      softmax_step(state, logit, page != kNoPage, weights[warp][lane]);
    } else {  // V: every row of the tile, weighted
      const std::uint64_t left = end - j0;
      add_values<kHeads, kKind, kDim>(state, buffer,
                                      left < kRows ? static_cast<std::uint32_t>(left) : kRows,
                                      weights[warp], lane, vf.group);
    }
    issue(n + depth);  // into the buffer just read
  }

  stage_wait<0>();
  combine_warps<kHeads, kDim>(state, a, it, warp, lane, shared);
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
