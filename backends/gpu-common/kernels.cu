// The GPU kernels, one source for nvcc and hipcc (and, in the tests, for the C++ compiler over the
// CPU emulator of tests/gpu-emulator); kernel_support.hpp holds what differs between vendors.
// Decode attention over the common formats is staged_attention.cuh's; both attention kernels end
// with merge_states.cuh's merge.
#include "kernel_support.hpp"  // first: the vendor's device header, or the emulator

#include "general_attention.cuh"
#include "merge_states.cuh"
#include "pool_kernels.cuh"
#include "staged_attention.cuh"

namespace kvcache::gpu {
namespace {

void check_launch(const char* kernel) {
  check(GPU(GetLastError)(), kernel);
}

std::uint32_t blocks_for(std::uint64_t threads, std::uint32_t per_block) {
  return static_cast<std::uint32_t>((threads + per_block - 1) / per_block);
}

// One block per (query, q head); threads over the head dimension.
// One thread per element of a turned query: its pair's partner is another element, so each
// thread reads both and writes its own.
__global__ void rotate_kernel(RotateArgs a) {
  const std::uint64_t t = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const std::uint32_t dim = a.head_dim;
  if (t >= std::uint64_t{a.rotations} * a.q_heads * dim) return;
  const auto j = static_cast<std::uint32_t>(t % dim);
  const std::uint64_t row = t / dim, r = row / a.q_heads, head = row % a.q_heads;
  const std::uint64_t from = (std::uint64_t{a.query_of[r]} * a.q_heads + head) * dim;
  const float x = load_input(a.q, a.q_dtype, from + j);
  if (j >= a.rotary_dims) {
    a.turned[t] = x;
    return;
  }
  const std::uint32_t half = a.rotary_dims / 2;
  // The pair's index i, this element's partner, and whether it is the pair's first.
  const std::uint32_t i = a.adjacent ? j / 2 : j % half;
  const bool first = a.adjacent ? j % 2 == 0 : j < half;
  const std::uint32_t partner =
      a.adjacent ? (first ? j + 1 : j - 1) : (first ? j + half : j - half);
  const float y = load_input(a.q, a.q_dtype, from + partner);
  const float c = a.cos_sin[r * a.rotary_dims + i], s = a.cos_sin[r * a.rotary_dims + half + i];
  a.turned[t] = first ? x * c - y * s : x * c + y * s;
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
  KVC_LAUNCH(pool::encode_kernel, blocks_for(threads, 128), 128, stream)(a);
  check_launch("encode kernel");
}

void launch_group_encode(const GroupEncodeArgs& a, GPU(Stream_t) stream) {
  const DeviceFormat& f = a.value ? a.pools.v : a.pools.k;
  if (a.groups == 0) return;
  KVC_LAUNCH(pool::group_rows_kernel,
             blocks_for(std::uint64_t{a.groups} * f.group * a.pools.kv_heads, 128), 128, stream)
  (a);
  check_launch("group rows kernel");
  KVC_LAUNCH(pool::group_encode_kernel, blocks_for(std::uint64_t{a.groups} * a.pools.kv_heads, 128),
             128, stream)
  (a);
  check_launch("group encode kernel");
}

void launch_rotate(const RotateArgs& a, GPU(Stream_t) stream) {
  const std::uint64_t threads = std::uint64_t{a.rotations} * a.q_heads * a.head_dim;
  if (threads == 0) return;
  KVC_LAUNCH(rotate_kernel, blocks_for(threads, 128), 128, stream)(a);
  check_launch("rotate kernel");
}

void launch_decode(const DecodeArgs& a, GPU(Stream_t) stream) {
  const std::uint64_t threads = a.rows * a.pools.kv_heads * 2;
  if (threads == 0) return;
  KVC_LAUNCH(pool::decode_kernel, blocks_for(threads, 128), 128, stream)(a);
  check_launch("decode kernel");
}

void launch_poison(const PoolLayout& pools, std::uint32_t layers, std::uint32_t page_size,
                   std::uint32_t page, std::uint32_t from_slot, GPU(Stream_t) stream) {
  KVC_LAUNCH(pool::poison_kernel, layers * pools.kv_heads * 2, 256, stream)
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
  KVC_LAUNCH(pool::move_kernel, a.moves, 256, stream)(a, bytes, true);
  check_launch("slot gather kernel");
  KVC_LAUNCH(pool::move_kernel, a.moves, 256, stream)(a, bytes, false);
  check_launch("slot scatter kernel");
}

void launch_attend(const AttentionArgs& a, std::uint32_t item_heads, GPU(Stream_t) stream) {
  if (a.n_items == 0) return;
  if (!staged::launch(a, item_heads, stream)) {
    const dim3 grid(a.n_items), block(kWarp * general::kAttendWarps);
    constexpr std::uint32_t kScratch = sizeof(merge::Scratch<kWarp * general::kAttendWarps>);
    if (item_heads <= 1)
      KVC_LAUNCH_SHARED(general::attend_kernel<1>, grid, block, kScratch, stream)(a);
    else if (item_heads <= 2)
      KVC_LAUNCH_SHARED(general::attend_kernel<2>, grid, block, kScratch, stream)(a);
    else if (item_heads <= 4)
      KVC_LAUNCH_SHARED(general::attend_kernel<4>, grid, block, kScratch, stream)(a);
    else
      KVC_LAUNCH_SHARED(general::attend_kernel<8>, grid, block, kScratch, stream)(a);
  }
  check_launch("attention kernel");
}

void launch_scores(const ScoreArgs& a, GPU(Stream_t) stream) {
  if (a.queries == 0 || a.max_visible == 0) return;
  const dim3 grid(blocks_for(a.max_visible, 256), a.queries < 65535u ? a.queries : 65535u);
  KVC_LAUNCH(scores_kernel, grid, 256, stream)(a);
  check_launch("score kernel");
}

}  // namespace kvcache::gpu
