// The general attention kernel (part of kernels.cu's translation unit), for every shape the
// staged kernel does not take: fp32, kivi-k and its residual rows, other head sizes, K and V in
// different formats, and the logits that accumulated scores need.
//
// A work item is read by one block of kAttendWarps warps, each taking tiles of 32 visible slots
// (one per lane). A K or V row is read by a row's worth of lanes, each loading a chunk of kChunk
// elements with one vector load, so a warp reads 32 / row_lanes rows at a time, and keeps
// kUnroll such loads in flight before it decodes; the format's scale and offset are applied once
// per chunk. Logits of a tile go to the lane of their slot, which updates a base-2 online softmax
// once per tile; the values are then summed with the tile's weights.
#pragma once

#include <cstdint>

#include "kernel_support.hpp"
#include "merge_states.cuh"

namespace kvcache::gpu::general {

constexpr std::uint32_t kAttendWarps = kItemSlots / kWarp;
constexpr std::uint32_t kChunk = kHeadDimStep;
// Rows in flight per lane, and blocks per multiprocessor the registers must allow (items of up to
// 4 heads). 2 and 3 (168 registers, no spills) against the other pairs measured on an H200
// (docs/perf-log.md): none clearly better, the kernel being bound by its instructions.
constexpr std::uint32_t kUnroll = 2;
[[maybe_unused]] constexpr std::uint32_t kMinBlocks = 3;  // unused where __launch_bounds__ is not

// Where a lane's slot of the tile is: its page (kNoPage past the item's end), and in one word its
// slot within the page and whether its K or V row still waits in the residual rows.
constexpr std::uint32_t kInPage = kMaxPageSize - 1, kHeldK = kMaxPageSize, kHeldV = kHeldK << 1;

// A chunk of a row as loaded: up to 16 bytes of codes and one word of metadata (the token's
// scale for int8 and fp8, the group's scale and minimum for int4). fp32's second 16 bytes are
// read when decoding: registers for them would cost every format occupancy.
struct RawChunk {
  std::uint32_t w[4];
  std::uint32_t meta;
};

// A row's place: its tile, its slot in it, and its fp16 row when it waits in the residual.
struct RowAt {
  const std::uint8_t* tile;
  std::uint32_t slot;
  const std::uint16_t* held;
};

// Issues the loads of chunk c of a row (kivi-k's per-channel metadata is read when decoding).
KVC_INLINE void load_chunk(std::uint32_t kind, const DeviceFormat& f, const RowAt& at,
                           std::uint32_t c, RawChunk& raw) {
  if (at.held != nullptr) {
    load_words<4>(reinterpret_cast<const std::uint8_t*>(at.held + kChunk * c), raw.w);
    return;
  }
  const std::uint8_t* codes = at.tile + std::size_t{at.slot} * f.slot_code_bytes;
  const std::uint8_t* meta = at.tile + f.code_bytes + std::size_t{at.slot} * f.slot_meta_bytes;
  switch (kind) {
    case kFp32:
      load_words<4>(codes + 32 * c, raw.w);
      return;
    case kFp16:
    case kBf16:
      load_words<4>(codes + 16 * c, raw.w);
      return;
    case kFp8E4M3:
    case kInt8PerToken:
      load_words<2>(codes + 8 * c, raw.w);
      load_words<1>(meta, &raw.meta);
      return;
    case kInt4Group:
      load_words<1>(codes + 4 * c, raw.w);
      load_words<1>(meta + kChunk * c / f.group * 4, &raw.meta);
      return;
    default:  // kivi-k: 4 or 2 bits per element
      if (f.bits == 4) {
        load_words<1>(codes + 4 * c, raw.w);
      } else {
        std::uint16_t h;
        std::memcpy(&h, codes + 2 * c, 2);
        raw.w[0] = h;
      }
  }
}

// A chunk's values are x[e] * scale + bias: scale and bias are shared by the chunk, so a dot
// product or a weighted sum applies them once.
struct Chunk {
  float x[kChunk];
  float scale = 1.0f, bias = 0.0f;
};

KVC_INLINE void decode_chunk(std::uint32_t kind, const DeviceFormat& f, const RowAt& at,
                             const RawChunk& raw, std::uint32_t c, std::uint32_t dim, Chunk& out) {
  if (at.held != nullptr || kind == kFp16) {
    decode_codes<kFp16, kChunk>(raw.w, out.x);
    return;
  }
  switch (kind) {
    case kFp32: {
      std::uint32_t high[4];
      load_words<4>(at.tile + std::size_t{at.slot} * f.slot_code_bytes + 32 * c + 16, high);
      for (std::uint32_t e = 0; e < kChunk; ++e)
        out.x[e] = bits_float(e < 4 ? raw.w[e] : high[e - 4]);
      return;
    }
    case kBf16:
      decode_codes<kBf16, kChunk>(raw.w, out.x);
      return;
    case kFp8E4M3:
      out.scale = bits_float(raw.meta);
      decode_codes<kFp8E4M3, kChunk>(raw.w, out.x);
      return;
    case kInt8PerToken:
      out.scale = bits_float(raw.meta);
      decode_codes<kInt8PerToken, kChunk>(raw.w, out.x);
      return;
    case kInt4Group:
      halves_to_floats(raw.meta, out.scale, out.bias);
      decode_codes<kInt4Group, kChunk>(raw.w, out.x);
      return;
    default: {  // kivi-k: per channel, a scale and minimum shared by the slot's token group
      const std::uint8_t* meta =
          at.tile + f.code_bytes + std::size_t{at.slot / f.group} * dim * 4 + 4 * kChunk * c;
      const std::uint32_t mask = (1u << f.bits) - 1;
      for (std::uint32_t e = 0; e < kChunk; ++e) {
        std::uint32_t word;
        load_words<1>(meta + 4 * e, &word);
        float scale, minimum;
        halves_to_floats(word, scale, minimum);
        out.x[e] = static_cast<float>((raw.w[0] >> (f.bits * e)) & mask) * scale + minimum;
      }
    }
  }
}

// Lanes that read one row: a power of two, at least its chunks.
KVC_HD std::uint32_t row_lanes_for(std::uint32_t chunks) {
  std::uint32_t lanes = 1;
  while (lanes < chunks) lanes *= 2;
  return lanes;
}

// The general kernel, for shapes the staged kernel does not take: one block per work item; kHeads
// (a power of two) bounds the item's query heads.
template <std::uint32_t kHeads>
__global__ void __launch_bounds__(kWarp* kAttendWarps, kHeads <= 4 ? kMinBlocks : 1)
    attend_kernel(AttentionArgs a) {
  __shared__ float warp_m[kAttendWarps][kHeads], warp_l[kAttendWarps][kHeads];
  __shared__ float warp_acc[kAttendWarps * kHeads * kMaxHeadDim];  // [warp][head][dim]
  const WorkItem it = a.items[blockIdx.x];
  const DeviceFormat kf = a.pools.k, vf = a.pools.v;
  const std::uint32_t k_kind = kf.kind, v_kind = vf.kind;
  const std::uint32_t dim = a.pools.head_dim, chunks = dim / kChunk;
  const std::uint32_t row_lanes = row_lanes_for(chunks);
  const std::uint32_t rows = kWarp / row_lanes;  // rows a warp reads at once
  const std::uint32_t warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const std::uint32_t c = lane % row_lanes, row = lane / row_lanes;
  const bool reads = c < chunks;
  const std::uint32_t first_head = it.kv_head * (a.q_heads / a.pools.kv_heads) + it.head0;

  float q[kHeads][kChunk], q_sum[kHeads];
  KVC_UNROLL
  for (std::uint32_t g = 0; g < kHeads; ++g) {
    q_sum[g] = 0.0f;
    for (std::uint32_t e = 0; e < kChunk; ++e) {
      q[g][e] =
          g < it.heads && reads
              ? (it.rotation == 0
                     ? load_input(a.q, a.q_dtype,
                                  (std::uint64_t{it.query} * a.q_heads + first_head + g) * dim +
                                      kChunk * c + e)
                     : a.turned[(std::uint64_t{it.rotation - 1} * a.q_heads + first_head + g) *
                                    dim +
                                kChunk * c + e]) *
                    a.scale
              : 0.0f;
      q_sum[g] += q[g][e];
    }
  }

  std::uint8_t* const k_pool = a.pools.pool(a.layer, false);
  std::uint8_t* const v_pool = a.pools.pool(a.layer, true);
  const std::uint64_t kv_head = it.kv_head;
  const auto row_at = [&](bool value, std::uint32_t page, std::uint32_t word) {
    const DeviceFormat& f = value ? vf : kf;
    const std::uint32_t slot = word & kInPage;
    const std::uint16_t* held = a.held_from == nullptr || (word & (value ? kHeldV : kHeldK)) == 0
                                    ? nullptr
                                    : a.residual + a.residual_offset[2 * it.query + value] +
                                          (kv_head * f.group + slot % f.group) * dim;
    return RowAt{a.pools.tile_in(value ? v_pool : k_pool, f, page, it.kv_head), slot, held};
  };
  const std::uint32_t span_begin = a.span_offset[it.query], span_end = a.span_offset[it.query + 1];
  const std::uint32_t* pages = a.pages + a.page_offset[it.query];
  const std::uint64_t held_k = a.held_from != nullptr ? a.held_from[2 * it.query] : ~0ull;
  const std::uint64_t held_v = a.held_from != nullptr ? a.held_from[2 * it.query + 1] : ~0ull;
  const std::uint64_t visible =
      a.logits != nullptr ? a.logit_offset[it.query + 1] - a.logit_offset[it.query] : 0;

  float m[kHeads], l[kHeads], acc[kHeads][kChunk], acc_bias[kHeads];
  KVC_UNROLL
  for (std::uint32_t g = 0; g < kHeads; ++g) {
    m[g] = -INFINITY;
    l[g] = acc_bias[g] = 0.0f;
    for (std::uint32_t e = 0; e < kChunk; ++e) acc[g][e] = 0.0f;
  }
  const std::uint64_t end = std::uint64_t{it.first} + it.count;
  const std::uint32_t steps = row_lanes;  // of `rows` slots each, per tile of 32
  // A lane's slot of a tile: where its rows are (the next tile's is looked up a tile ahead, so
  // the page table's latency hides behind the current tile).
  const auto locate = [&](std::uint64_t j, std::uint32_t& page, std::uint32_t& word) {
    page = kNoPage;
    word = 0;
    if (j >= end) return;
    const std::uint64_t slot = visible_slot(a.spans, span_begin, span_end, j);
    const auto slot32 = static_cast<std::uint32_t>(slot);  // a sequence's slots fit 32 bits
    page = pages[slot32 / a.page_size];
    word = slot32 % a.page_size | (slot >= held_k ? kHeldK : 0u) | (slot >= held_v ? kHeldV : 0u);
  };
  constexpr std::uint32_t kStride = kAttendWarps * kWarp;
  std::uint32_t next_page, next_word;
  locate(it.first + std::uint64_t{warp} * kWarp + lane, next_page, next_word);
  for (std::uint64_t j0 = it.first + std::uint64_t{warp} * kWarp; j0 < end; j0 += kStride) {
    const std::uint32_t my_page = next_page, my_word = next_word;
    locate(j0 + kStride + lane, next_page, next_word);

    // Logits: step s reads slot s * rows + row of the tile, then hands each logit to its lane.
    float logit[kHeads];
    KVC_UNROLL
    for (std::uint32_t g = 0; g < kHeads; ++g) logit[g] = -INFINITY;
    for (std::uint32_t s0 = 0; s0 < steps; s0 += kUnroll) {
      RawChunk raw[kUnroll];
      std::uint32_t page[kUnroll], word[kUnroll];
      KVC_UNROLL
      for (std::uint32_t u = 0; u < kUnroll; ++u) {
        const std::uint32_t from = ((s0 + u) * rows + row) % kWarp;
        page[u] = KVC_SHFL(my_page, from);
        word[u] = KVC_SHFL(my_word, from);
        if (s0 + u < steps && page[u] != kNoPage && reads)
          load_chunk(k_kind, kf, row_at(false, page[u], word[u]), c, raw[u]);
      }
      KVC_UNROLL
      for (std::uint32_t u = 0; u < kUnroll; ++u) {
        float dot[kHeads];
        KVC_UNROLL
        for (std::uint32_t g = 0; g < kHeads; ++g) dot[g] = 0.0f;
        if (s0 + u < steps && page[u] != kNoPage && reads) {
          const RowAt at = row_at(false, page[u], word[u]);
          Chunk x;
          decode_chunk(k_kind, kf, at, raw[u], c, dim, x);
          KVC_UNROLL
          for (std::uint32_t g = 0; g < kHeads; ++g) {
            float d = 0.0f;
            for (std::uint32_t e = 0; e < kChunk; ++e) d += q[g][e] * x.x[e];
            dot[g] = d * x.scale + q_sum[g] * x.bias;
          }
        }
        KVC_UNROLL
        for (std::uint32_t g = 0; g < kHeads; ++g) {
          KVC_UNROLL
          for (std::uint32_t mask = kWarp / 2; mask > 0; mask /= 2)
            if (mask < row_lanes) dot[g] += KVC_SHFL_XOR(dot[g], mask);
          const float mine = KVC_SHFL(dot[g], lane % rows * row_lanes);
          if (lane / rows == s0 + u) logit[g] = mine;
        }
      }
    }

    // The tile's softmax step: m is the same in every lane, l is summed over lanes at the end.
    float p[kHeads];
    KVC_UNROLL
    for (std::uint32_t g = 0; g < kHeads; ++g) {
      if (my_page == kNoPage) logit[g] = -INFINITY;  // (its lane took a row's 0)
      const float tile_top = warp_max(logit[g]);
      const float top = m[g] > tile_top ? m[g] : tile_top;
      const float shrink = weight_of(m[g], top);
      p[g] = weight_of(logit[g], top);
      l[g] = l[g] * shrink + p[g];
      acc_bias[g] *= shrink;
      for (std::uint32_t e = 0; e < kChunk; ++e) acc[g][e] *= shrink;
      m[g] = top;
      if (a.logits != nullptr && g < it.heads && my_page != kNoPage)
        a.logits[a.logit_offset[it.query] * a.q_heads + (first_head + g) * visible + j0 + lane] =
            logit[g];
    }

    // Values, weighted: the same rows in the same order.
    for (std::uint32_t s0 = 0; s0 < steps; s0 += kUnroll) {
      RawChunk raw[kUnroll];
      std::uint32_t page[kUnroll], word[kUnroll];
      float weight[kUnroll][kHeads];
      KVC_UNROLL
      for (std::uint32_t u = 0; u < kUnroll; ++u) {
        const std::uint32_t from = ((s0 + u) * rows + row) % kWarp;
        page[u] = KVC_SHFL(my_page, from);
        word[u] = KVC_SHFL(my_word, from);
        KVC_UNROLL
        for (std::uint32_t g = 0; g < kHeads; ++g) weight[u][g] = KVC_SHFL(p[g], from);
        if (s0 + u < steps && page[u] != kNoPage && reads)
          load_chunk(v_kind, vf, row_at(true, page[u], word[u]), c, raw[u]);
      }
      KVC_UNROLL
      for (std::uint32_t u = 0; u < kUnroll; ++u) {
        if (s0 + u >= steps || page[u] == kNoPage || !reads) continue;
        const RowAt at = row_at(true, page[u], word[u]);
        Chunk x;
        decode_chunk(v_kind, vf, at, raw[u], c, dim, x);
        KVC_UNROLL
        for (std::uint32_t g = 0; g < kHeads; ++g) {
          const float w = weight[u][g] * x.scale;
          for (std::uint32_t e = 0; e < kChunk; ++e) acc[g][e] += w * x.x[e];
          acc_bias[g] += weight[u][g] * x.bias;
        }
      }
    }
  }

  // Sum the rows' shares (lanes with the same chunk), then combine the warps.
  KVC_UNROLL
  for (std::uint32_t g = 0; g < kHeads; ++g) {
    KVC_UNROLL
    for (std::uint32_t mask = 1; mask < kWarp; mask *= 2) {
      if (mask < row_lanes) continue;
      acc_bias[g] += KVC_SHFL_XOR(acc_bias[g], mask);
      for (std::uint32_t e = 0; e < kChunk; ++e) acc[g][e] += KVC_SHFL_XOR(acc[g][e], mask);
    }
    l[g] = warp_sum(l[g]);
    if (row == 0 && reads)
      for (std::uint32_t e = 0; e < kChunk; ++e)
        warp_acc[(warp * kHeads + g) * dim + kChunk * c + e] = acc[g][e] + acc_bias[g];
    if (lane == 0) {
      warp_m[warp][g] = m[g];
      warp_l[warp][g] = l[g];
    }
  }
  __syncthreads();
  KVC_DYNAMIC_SHARED(scratch);
  merge::write_item_state<kWarp * kAttendWarps>(a, it, &warp_m[0][0], &warp_l[0][0], warp_acc,
                                                kAttendWarps, kHeads, scratch);
}

}  // namespace kvcache::gpu::general
