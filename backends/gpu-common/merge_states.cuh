// The merge of work items' softmax states (flash-decoding's second half), fused into the
// attention kernels, so that a layer's attention is one launch. Part of kernels.cu's translation
// unit.
//
// A merge unit is one query's KV head and a chunk of up to kMaxItemHeads of its group's query
// heads; its work items split the query's visible slots and lie side by side (first_item). Each
// item's block ends by write_item_state:
//  - a unit of one item (a short sequence, or a large batch) has its output at once: the block
//    normalizes its state and writes the output, with no partial state and no merge;
//  - otherwise the block writes its partial state (m, l, values), makes it visible to the device
//    and counts itself in the unit's arrival counter; the block that arrives last merges every
//    item of the unit into the output and sets the counter back to 0 for the next layer. The
//    counters are zeroed once per plan.
// The merge's threads take items side by side for the maxima and sums, then (head, dimension)
// pairs for the values over chunks of items whose weights wait in shared memory: no thread reads
// item after item in a chain of dependent loads.
#pragma once

#include "kernel_support.hpp"

namespace kvcache::gpu::merge {

// Items whose weights wait in shared memory at once.
constexpr std::uint32_t kItemsAtOnce = 32;

// Shared memory a merge needs, carved by the kernel from its own (idle by then).
template <std::uint32_t kThreads>
struct Scratch {
  float weight[kItemsAtOnce][kMaxItemHeads];
  std::uint64_t state_at[kItemsAtOnce];
  float lanes[kThreads / kWarp][kMaxItemHeads];  // a value per warp and head, for reductions
  float top[kMaxItemHeads], sum[kMaxItemHeads];
  std::uint32_t last;  // whether this block completed its unit
};

// A float another block of this launch wrote: read past this multiprocessor's L1, which is not
// coherent with the others' writes.
KVC_INLINE float load_coherent(const float* p) {
#if defined(__CUDACC__)
  return __ldcg(p);
#elif defined(__HIPCC__)
  return __hip_atomic_load(p, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
#else
  return *p;
#endif
}

// The unit of a work item (as DeviceAttention::make_plan orders them: query, KV head, head chunk).
KVC_INLINE std::uint32_t unit_of(const AttentionArgs& a, const WorkItem& it) {
  const std::uint32_t group = a.q_heads / a.pools.kv_heads;
  const std::uint32_t chunks = (group + kMaxItemHeads - 1) / kMaxItemHeads;
  return (it.query * a.pools.kv_heads + it.kv_head) * chunks + it.head0 / kMaxItemHeads;
}

// Per head g < heads, the largest (is_max) or the sum of x[g] over the block's threads, into
// out[g] (shared memory every thread reads after the call).
template <std::uint32_t kThreads>
KVC_INLINE void block_reduce(float* x, bool is_max, Scratch<kThreads>& s, float* out) {
  const std::uint32_t warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  KVC_UNROLL
  for (std::uint32_t g = 0; g < kMaxItemHeads; ++g) {
    x[g] = is_max ? warp_max(x[g]) : warp_sum(x[g]);
    if (lane == 0) s.lanes[warp][g] = x[g];
  }
  __syncthreads();
  if (threadIdx.x < kMaxItemHeads) {
    float r = s.lanes[0][threadIdx.x];
    for (std::uint32_t w = 1; w < kThreads / kWarp; ++w)
      r = is_max ? max_of(r, s.lanes[w][threadIdx.x]) : r + s.lanes[w][threadIdx.x];
    out[threadIdx.x] = r;
  }
  __syncthreads();
}

// Where (query, head) of the output and of the final state are.
KVC_INLINE std::uint64_t output_row(const AttentionArgs& a, const WorkItem& it, std::uint32_t g) {
  const std::uint32_t group = a.q_heads / a.pools.kv_heads;
  return std::uint64_t{it.query} * a.q_heads + it.kv_head * group + it.head0 + g;
}

// Head g of the item's output, element d, from its weighted value and softmax sum; and the head's
// final softmax state (max, sum) where scores want it.
KVC_INLINE void store_normalized(const AttentionArgs& a, const WorkItem& it, std::uint32_t g,
                                 std::uint32_t d, float value, float sum) {
  store_output(a.out, a.out_dtype, output_row(a, it, g) * a.pools.head_dim + d,
               sum > 0.0f ? value / sum : 0.0f);
}
KVC_INLINE void store_final_state(const AttentionArgs& a, const WorkItem& it, std::uint32_t g,
                                  float top, float sum) {
  if (a.final_state == nullptr) return;
  a.final_state[2 * output_row(a, it, g)] = top;
  a.final_state[2 * output_row(a, it, g) + 1] = sum;
}

// Merges the states of the unit's items [first, last) (all with the item's heads) into the
// output and the final state.
template <std::uint32_t kThreads>
KVC_INLINE void merge_unit(const AttentionArgs& a, const WorkItem& it, std::uint32_t first,
                           std::uint32_t last, Scratch<kThreads>& s) {
  const std::uint32_t dim = a.pools.head_dim, heads = it.heads;
  const std::uint64_t stride = item_state_floats(dim);
  const auto state = [&](std::uint32_t item, std::uint32_t g) {
    return a.partial + item * stride + std::uint64_t{g} * (2 + dim);
  };
  float x[kMaxItemHeads];
  KVC_UNROLL
  for (std::uint32_t g = 0; g < kMaxItemHeads; ++g) x[g] = -INFINITY;
  for (std::uint32_t item = first + threadIdx.x; item < last; item += kThreads) {
    KVC_UNROLL
    for (std::uint32_t g = 0; g < kMaxItemHeads; ++g)
      if (g < heads) x[g] = max_of(x[g], load_coherent(state(item, g)));
  }
  block_reduce(x, true, s, s.top);
  KVC_UNROLL
  for (std::uint32_t g = 0; g < kMaxItemHeads; ++g) x[g] = 0.0f;
  for (std::uint32_t item = first + threadIdx.x; item < last; item += kThreads) {
    KVC_UNROLL
    for (std::uint32_t g = 0; g < kMaxItemHeads; ++g)
      if (g < heads)
        x[g] +=
            load_coherent(state(item, g) + 1) * weight_of(load_coherent(state(item, g)), s.top[g]);
  }
  block_reduce(x, false, s, s.sum);

  // Values: thread t takes elements t, t + kThreads, ... of [head][dim].
  constexpr std::uint32_t kMine = (kMaxItemHeads * kMaxHeadDim + kThreads - 1) / kThreads;
  float value[kMine] = {};
  for (std::uint32_t chunk = first; chunk < last; chunk += kItemsAtOnce) {
    const std::uint32_t n = last - chunk < kItemsAtOnce ? last - chunk : kItemsAtOnce;
    if (threadIdx.x < n) {
      for (std::uint32_t g = 0; g < heads; ++g)
        s.weight[threadIdx.x][g] =
            weight_of(load_coherent(state(chunk + threadIdx.x, g)), s.top[g]);
      s.state_at[threadIdx.x] = (chunk + threadIdx.x) * stride;
    }
    __syncthreads();
    for (std::uint32_t i = 0; i < n; ++i) {
      KVC_UNROLL
      for (std::uint32_t k = 0; k < kMine; ++k) {
        const std::uint32_t e = threadIdx.x + k * kThreads, g = e / dim, d = e % dim;
        if (g < heads)
          value[k] +=
              load_coherent(a.partial + s.state_at[i] + g * (2 + dim) + 2 + d) * s.weight[i][g];
      }
    }
    __syncthreads();  // the chunk's weights have been read
  }
  KVC_UNROLL
  for (std::uint32_t k = 0; k < kMine; ++k) {
    const std::uint32_t e = threadIdx.x + k * kThreads, g = e / dim, d = e % dim;
    if (g < heads) store_normalized(a, it, g, d, value[k], s.sum[g]);
  }
  if (threadIdx.x < heads)
    store_final_state(a, it, threadIdx.x, s.top[threadIdx.x], s.sum[threadIdx.x]);
}

// How a block ends its item: the block's warps each hold a softmax state per query head of the
// item, their maxima and sums ([warp][head], max_heads heads a warp) and weighted values
// ([warp][head][dim]). Combines them and writes the output (a unit of one item) or the item's
// partial state, then merges the unit when this block is the last of it. `scratch` is shared
// memory of the block that no thread reads or writes any more, at least sizeof(Scratch).
template <std::uint32_t kThreads>
KVC_INLINE void write_item_state(const AttentionArgs& a, const WorkItem& it, const float* warp_m,
                                 const float* warp_l, const float* warp_acc, std::uint32_t warps,
                                 std::uint32_t max_heads, std::uint8_t* scratch) {
  const std::uint32_t dim = a.pools.head_dim, unit = unit_of(a, it);
  const std::uint32_t first = a.first_item[unit], last = a.first_item[unit + 1];
  const bool alone = last - first == 1;
  float* const partial = a.partial + std::uint64_t{blockIdx.x} * item_state_floats(dim);
  for (std::uint32_t i = threadIdx.x; i < it.heads * dim; i += blockDim.x) {
    const std::uint32_t g = i / dim, d = i % dim;
    float top = -INFINITY;
    for (std::uint32_t w = 0; w < warps; ++w) top = max_of(top, warp_m[w * max_heads + g]);
    float sum = 0.0f, value = 0.0f;
    for (std::uint32_t w = 0; w < warps; ++w) {
      const float f = weight_of(warp_m[w * max_heads + g], top);
      sum += warp_l[w * max_heads + g] * f;
      value += warp_acc[(w * max_heads + g) * dim + d] * f;
    }
    if (alone) {
      store_normalized(a, it, g, d, value, sum);
      if (d == 0) store_final_state(a, it, g, top, sum);
      continue;
    }
    float* state = partial + std::uint64_t{g} * (2 + dim);
    if (d == 0) {
      state[0] = top;
      state[1] = sum;
    }
    state[2 + d] = value;
  }
  if (alone) return;
  auto& s = *reinterpret_cast<Scratch<kThreads>*>(scratch);
  __threadfence();  // this thread's share of the state reaches the device before the count
  __syncthreads();
  if (threadIdx.x == 0) {
    s.last = atomicAdd(a.arrived + unit, 1u) == last - first - 1 ? 1u : 0u;
    if (s.last != 0) a.arrived[unit] = 0;  // every other item has arrived: ready for the next run
  }
  __syncthreads();
  if (s.last == 0) return;
  __threadfence();  // the other blocks' states, counted before this block's arrival, are read now
  merge_unit<kThreads>(a, it, first, last, s);
}

}  // namespace kvcache::gpu::merge
