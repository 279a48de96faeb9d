// The GPU kernels, one source for nvcc and hipcc (and, in the tests, for the C++ compiler over the
// CPU emulator of tests/gpu-emulator). The vendor differences are the runtime header, the launch
// and the warp shuffle, whose width is fixed at 32 lanes: NVIDIA warps, and the halves of an AMD
// wave64 (or a whole wave32), behave the same.
#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#define KVC_SHFL_XOR(v, mask) __shfl_xor((v), (mask), 32)
#define KVC_LAUNCH(kernel, grid, block, stream) kernel<<<(grid), (block), 0, (stream)>>>
#define KVC_UNROLL _Pragma("unroll")
#elif defined(__CUDACC__)
#include <cuda_runtime.h>
#define KVC_SHFL_XOR(v, mask) __shfl_xor_sync(0xFFFFFFFFu, (v), (mask), 32)
#define KVC_LAUNCH(kernel, grid, block, stream) kernel<<<(grid), (block), 0, (stream)>>>
#define KVC_UNROLL _Pragma("unroll")
#else
#include "emulated_device.hpp"
#define KVC_UNROLL
#define KVC_SHFL_XOR(v, mask) ::kvcache::gpu::emu::shfl_xor((v), (mask))
#define KVC_LAUNCH(kernel, grid, block, stream) \
  ::kvcache::gpu::emu::launch((grid), (block), (stream), kernel)
#endif

#include "kernels.hpp"

namespace kvcache::gpu {
namespace {

constexpr std::uint32_t kWarp = 32;
constexpr std::uint32_t kAttendWarps = 4;
constexpr std::uint32_t kTokens = 4;  // visible slots a warp loads before it computes

void check_launch(const char* kernel) {
  check(GPU(GetLastError)(), kernel);
}

std::uint32_t blocks_for(std::uint64_t threads, std::uint32_t per_block) {
  return static_cast<std::uint32_t>((threads + per_block - 1) / per_block);
}

__device__ float load_input(const void* p, Dtype t, std::uint64_t i) {
  switch (t) {
    case Dtype::f16:
      return fp16_value(static_cast<const std::uint16_t*>(p)[i]);
    case Dtype::bf16:
      return bf16_value(static_cast<const std::uint16_t*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

__device__ void store_output(void* p, Dtype t, std::uint64_t i, float x) {
  switch (t) {
    case Dtype::f16:
      static_cast<std::uint16_t*>(p)[i] = fp16_bits(x);
      return;
    case Dtype::bf16:
      static_cast<std::uint16_t*>(p)[i] = bf16_bits(x);
      return;
    default:
      static_cast<float*>(p)[i] = x;
  }
}

// ---- append, gather, poison, compaction ----

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

// ---- attention ----

// The slot of a query's j-th visible slot (spans are few: a mask answers at most a handful).
__device__ std::uint64_t visible_slot(const std::uint64_t* spans, std::uint32_t begin,
                                      std::uint32_t end, std::uint64_t j) {
  for (std::uint32_t s = begin; s < end; ++s) {
    const std::uint64_t n = spans[2 * s + 1] - spans[2 * s];
    if (j < n) return spans[2 * s] + j;
    j -= n;
  }
  return 0;  // not reached: j < the query's visible count
}

__device__ float warp_sum(float x) {
  for (int mask = kWarp / 2; mask > 0; mask /= 2) x += KVC_SHFL_XOR(x, mask);
  return x;
}

__device__ float weight_of(float m, float top) {
  return m == -INFINITY ? 0.0f : exp2f(m - top);
}

// One block per work item: the warps take turns over runs of kTokens visible slots, read each K
// and V row once for all the item's query heads (lane i holds dims i, i + 32, ...), and keeps a
// base-2 online softmax; the warps' states are combined at the end. kDims = dims per lane.
template <int kDims>
__global__ void __launch_bounds__(kWarp* kAttendWarps) attend_kernel(AttentionArgs a) {
  __shared__ float qs[kMaxItemHeads][kMaxHeadDim];
  __shared__ float warp_m[kAttendWarps][kMaxItemHeads], warp_l[kAttendWarps][kMaxItemHeads];
  __shared__ float warp_acc[kAttendWarps][kMaxItemHeads][kWarp * kDims];
  const WorkItem it = a.items[blockIdx.x];
  const std::uint32_t dim = a.pools.head_dim, group = a.q_heads / a.pools.kv_heads;
  const std::uint32_t warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const std::uint32_t first_head = it.kv_head * group + it.head0;
  for (std::uint32_t i = threadIdx.x; i < it.heads * dim; i += blockDim.x)
    qs[i / dim][i % dim] =
        load_input(a.q, a.q_dtype, (std::uint64_t{it.query} * a.q_heads + first_head) * dim + i) *
        a.scale;
  for (std::uint32_t i = threadIdx.x; i < kMaxItemHeads * kMaxHeadDim; i += blockDim.x)
    if (i / kMaxHeadDim >= it.heads || i % kMaxHeadDim >= dim)
      qs[i / kMaxHeadDim][i % kMaxHeadDim] = 0.0f;
  __syncthreads();

  float m[kMaxItemHeads], l[kMaxItemHeads], acc[kMaxItemHeads][kDims];
  KVC_UNROLL
  for (std::uint32_t g = 0; g < kMaxItemHeads; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
    for (int t = 0; t < kDims; ++t) acc[g][t] = 0.0f;
  }
  const std::uint32_t span_begin = a.span_offset[it.query], span_end = a.span_offset[it.query + 1];
  const std::uint32_t* pages = a.pages + a.page_offset[it.query];
  const std::uint64_t visible =
      a.logits != nullptr ? a.logit_offset[it.query + 1] - a.logit_offset[it.query] : 0;
  // Lane's elements of a K (side 0) or V (side 1) row: from its tile, or from the residual rows
  // while its token group is being filled. (Rows are arrays by reference so they stay in
  // registers.)
  const auto load_row = [&](int side, std::uint64_t slot, std::uint32_t page, std::uint32_t in_page,
                            float(&row)[kDims]) {
    const DeviceFormat& f = side == 0 ? a.pools.k : a.pools.v;
    if (a.held_from != nullptr && slot >= a.held_from[2 * it.query + side]) {
      const std::uint16_t* held = a.residual + a.residual_offset[2 * it.query + side] +
                                  (std::uint64_t{it.kv_head} * f.group + slot % f.group) * dim;
      for (int t = 0; t < kDims; ++t)
        row[t] = lane + kWarp * t < dim ? fp16_value(held[lane + kWarp * t]) : 0.0f;
      return;
    }
    const SlotReader reader(f, a.pools.tile(a.layer, page, it.kv_head, side == 1), in_page);
    for (int t = 0; t < kDims; ++t)
      row[t] = lane + kWarp * t < dim ? reader[lane + kWarp * t] : 0.0f;
  };
  // Each warp takes kTokens consecutive visible slots per step and loads all of them before any
  // arithmetic, so several rows are in flight at once (memory-level parallelism).
  const std::uint64_t end = std::uint64_t{it.first} + it.count;
  for (std::uint64_t j0 = it.first + std::uint64_t{warp} * kTokens; j0 < end;
       j0 += kAttendWarps * kTokens) {
    float kd[kTokens][kDims], vd[kTokens][kDims];
    KVC_UNROLL
    for (std::uint32_t u = 0; u < kTokens; ++u) {
      if (j0 + u < end) {  // (a guard, not a break: loops that may exit early are not unrolled)
        const std::uint64_t slot = visible_slot(a.spans, span_begin, span_end, j0 + u);
        const std::uint32_t page = pages[slot / a.page_size];
        const auto in_page = static_cast<std::uint32_t>(slot % a.page_size);
        load_row(0, slot, page, in_page, kd[u]);
        load_row(1, slot, page, in_page, vd[u]);
      }
    }
    KVC_UNROLL
    for (std::uint32_t u = 0; u < kTokens; ++u) {
      KVC_UNROLL
      for (std::uint32_t g = 0; g < kMaxItemHeads; ++g) {
        if (j0 + u >= end || g >= it.heads) continue;  // uniform across the warp
        float dot = 0.0f;
        for (int t = 0; t < kDims; ++t) dot += qs[g][lane + kWarp * t] * kd[u][t];
        const float logit = warp_sum(dot);
        if (a.logits != nullptr && lane == 0)
          a.logits[a.logit_offset[it.query] * a.q_heads + (first_head + g) * visible + j0 + u] =
              logit;
        const float top = m[g] > logit ? m[g] : logit;
        const float shrink = weight_of(m[g], top), p = exp2f(logit - top);
        m[g] = top;
        l[g] = l[g] * shrink + p;
        for (int t = 0; t < kDims; ++t) acc[g][t] = acc[g][t] * shrink + p * vd[u][t];
      }
    }
  }
  KVC_UNROLL
  for (std::uint32_t g = 0; g < kMaxItemHeads; ++g) {
    if (lane == 0) {
      warp_m[warp][g] = m[g];
      warp_l[warp][g] = l[g];
    }
    for (int t = 0; t < kDims; ++t) warp_acc[warp][g][lane + kWarp * t] = acc[g][t];
  }
  __syncthreads();
  float* out = a.partial + std::uint64_t{blockIdx.x} * kMaxItemHeads * (2 + dim);
  for (std::uint32_t i = threadIdx.x; i < it.heads * dim; i += blockDim.x) {
    const std::uint32_t g = i / dim, d = i % dim;
    float top = -INFINITY;
    for (std::uint32_t w = 0; w < kAttendWarps; ++w) top = top > warp_m[w][g] ? top : warp_m[w][g];
    float sum = 0.0f, value = 0.0f;
    for (std::uint32_t w = 0; w < kAttendWarps; ++w) {
      const float f = weight_of(warp_m[w][g], top);
      sum += warp_l[w][g] * f;
      value += warp_acc[w][g][d] * f;
    }
    float* state = out + std::uint64_t{g} * (2 + dim);
    if (d == 0) {
      state[0] = top;
      state[1] = sum;
    }
    state[2 + d] = value;
  }
}

// One block per (query, q head); threads over the head dimension.
__global__ void merge_kernel(MergeArgs a) {
  const std::uint32_t query = blockIdx.x / a.q_heads, head = blockIdx.x % a.q_heads;
  const std::uint32_t group = a.q_heads / a.kv_heads, kv_head = head / group, g = head % group;
  const std::uint32_t pair = query * a.kv_heads + kv_head;
  const auto state_of = [&](std::uint32_t item) -> const float* {
    const WorkItem& it = a.items[item];
    if (g < it.head0 || g >= it.head0 + it.heads) return nullptr;
    return a.partial + (std::uint64_t{item} * kMaxItemHeads + (g - it.head0)) * (2 + a.head_dim);
  };
  float top = -INFINITY;
  for (std::uint32_t item = a.first_item[pair]; item < a.first_item[pair + 1]; ++item)
    if (const float* s = state_of(item)) top = top > s[0] ? top : s[0];
  float sum = 0.0f;
  for (std::uint32_t item = a.first_item[pair]; item < a.first_item[pair + 1]; ++item)
    if (const float* s = state_of(item)) sum += s[1] * weight_of(s[0], top);
  const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;
  for (std::uint32_t d = threadIdx.x; d < a.head_dim; d += blockDim.x) {
    float value = 0.0f;
    for (std::uint32_t item = a.first_item[pair]; item < a.first_item[pair + 1]; ++item)
      if (const float* s = state_of(item)) value += s[2 + d] * weight_of(s[0], top);
    store_output(a.out, a.out_dtype, (std::uint64_t{query} * a.q_heads + head) * a.head_dim + d,
                 value * inverse);
  }
  if (threadIdx.x == 0 && a.final_state != nullptr) {
    a.final_state[2 * blockIdx.x] = top;
    a.final_state[2 * blockIdx.x + 1] = sum;
  }
}

// Threads over (visible slot, query); atomics because query heads of every group add to a slot.
__global__ void scores_kernel(ScoreArgs a) {
  const std::uint64_t j = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  for (std::uint32_t query = blockIdx.y; query < a.queries; query += gridDim.y) {
    const std::uint64_t visible = a.logit_offset[query + 1] - a.logit_offset[query];
    if (j >= visible) continue;
    const float* logits = a.logits + a.logit_offset[query] * a.q_heads;
    float weight = 0.0f;
    for (std::uint32_t h = 0; h < a.q_heads; ++h) {
      const float* state = a.final_state + 2 * (std::uint64_t{query} * a.q_heads + h);
      if (state[1] > 0.0f) weight += exp2f(logits[h * visible + j] - state[0]) / state[1];
    }
    const std::uint64_t slot =
        visible_slot(a.spans, a.span_offset[query], a.span_offset[query + 1], j);
    atomicAdd(a.scores + a.score_offset[query] + slot, weight);
  }
}

}  // namespace

void launch_encode(const EncodeArgs& a, GPU(Stream_t) stream) {
  const std::uint64_t threads = a.rows * a.pools.kv_heads * 2;
  if (threads == 0) return;
  KVC_LAUNCH(encode_kernel, blocks_for(threads, 128), 128, stream)(a);
  check_launch("encode kernel");
}

void launch_group_encode(const GroupEncodeArgs& a, GPU(Stream_t) stream) {
  const DeviceFormat& f = a.value ? a.pools.v : a.pools.k;
  if (a.groups == 0) return;
  KVC_LAUNCH(group_rows_kernel,
             blocks_for(std::uint64_t{a.groups} * f.group * a.pools.kv_heads, 128), 128, stream)
  (a);
  check_launch("group rows kernel");
  KVC_LAUNCH(group_encode_kernel, blocks_for(std::uint64_t{a.groups} * a.pools.kv_heads, 128), 128,
             stream)
  (a);
  check_launch("group encode kernel");
}

void launch_decode(const DecodeArgs& a, GPU(Stream_t) stream) {
  const std::uint64_t threads = a.rows * a.pools.kv_heads * 2;
  if (threads == 0) return;
  KVC_LAUNCH(decode_kernel, blocks_for(threads, 128), 128, stream)(a);
  check_launch("decode kernel");
}

void launch_poison(const PoolLayout& pools, std::uint32_t layers, std::uint32_t page_size,
                   std::uint32_t page, std::uint32_t from_slot, GPU(Stream_t) stream) {
  KVC_LAUNCH(poison_kernel, layers * pools.kv_heads * 2, 256, stream)
  (pools, page_size, page, from_slot);
  check_launch("poison kernel");
}

std::uint64_t slot_bytes(const PoolLayout& p, std::uint32_t layers) {
  return std::uint64_t{layers} * p.kv_heads *
         (p.k.slot_code_bytes + p.k.slot_meta_bytes + p.v.slot_code_bytes + p.v.slot_meta_bytes);
}

void launch_move_slots(const SlotMoveArgs& a, GPU(Stream_t) stream) {
  if (a.moves == 0) return;
  const std::uint64_t bytes = slot_bytes(a.pools, a.layers);
  KVC_LAUNCH(move_kernel, a.moves, 256, stream)(a, bytes, true);
  check_launch("slot gather kernel");
  KVC_LAUNCH(move_kernel, a.moves, 256, stream)(a, bytes, false);
  check_launch("slot scatter kernel");
}

void launch_attend(const AttentionArgs& a, GPU(Stream_t) stream) {
  if (a.n_items == 0) return;
  const std::uint32_t dims = (a.pools.head_dim + kWarp - 1) / kWarp;
  const dim3 grid(a.n_items), block(kWarp * kAttendWarps);
  if (dims <= 1)
    KVC_LAUNCH(attend_kernel<1>, grid, block, stream)(a);
  else if (dims <= 2)
    KVC_LAUNCH(attend_kernel<2>, grid, block, stream)(a);
  else if (dims <= 4)
    KVC_LAUNCH(attend_kernel<4>, grid, block, stream)(a);
  else
    KVC_LAUNCH(attend_kernel<8>, grid, block, stream)(a);
  check_launch("attention kernel");
}

void launch_merge(const MergeArgs& a, GPU(Stream_t) stream) {
  if (a.queries == 0) return;
  KVC_LAUNCH(merge_kernel, a.queries * a.q_heads, 128, stream)(a);
  check_launch("merge kernel");
}

void launch_scores(const ScoreArgs& a, GPU(Stream_t) stream) {
  if (a.queries == 0 || a.max_visible == 0) return;
  const dim3 grid(blocks_for(a.max_visible, 256), a.queries < 65535u ? a.queries : 65535u);
  KVC_LAUNCH(scores_kernel, grid, 256, stream)(a);
  check_launch("score kernel");
}

}  // namespace kvcache::gpu
