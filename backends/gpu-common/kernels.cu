// The GPU kernels, one source for nvcc and hipcc (and, in the tests, for the C++ compiler over the
// CPU emulator of tests/gpu-emulator); kernel_support.hpp holds what differs between vendors.
// Decode attention over the common formats is staged_attention.cuh's; both attention kernels end
// with merge_states.cuh's merge.
#include "kernel_support.hpp"
#include "merge_states.cuh"
#include "staged_attention.cuh"

namespace kvcache::gpu {
namespace {

void check_launch(const char* kernel) {
  check(GPU(GetLastError)(), kernel);
}

std::uint32_t blocks_for(std::uint64_t threads, std::uint32_t per_block) {
  return static_cast<std::uint32_t>((threads + per_block - 1) / per_block);
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
//
// A work item is read by one block of kAttendWarps warps, each taking tiles of 32 visible slots
// (one per lane). A K or V row is read by a row's worth of lanes, each loading a chunk of kChunk
// elements with one vector load, so a warp reads 32 / row_lanes rows at a time, and keeps
// kUnroll such loads in flight before it decodes; the format's scale and offset are applied once
// per chunk. Logits of a tile go to the lane of their slot, which updates a base-2 online softmax
// once per tile; the values are then summed with the tile's weights.

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

void launch_rotate(const RotateArgs& a, GPU(Stream_t) stream) {
  const std::uint64_t threads = std::uint64_t{a.rotations} * a.q_heads * a.head_dim;
  if (threads == 0) return;
  KVC_LAUNCH(rotate_kernel, blocks_for(threads, 128), 128, stream)(a);
  check_launch("rotate kernel");
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

void launch_attend(const AttentionArgs& a, std::uint32_t item_heads, GPU(Stream_t) stream) {
  if (a.n_items == 0) return;
  if (!staged::launch(a, item_heads, stream)) {
    const dim3 grid(a.n_items), block(kWarp * kAttendWarps);
    constexpr std::uint32_t kScratch = sizeof(merge::Scratch<kWarp * kAttendWarps>);
    if (item_heads <= 1)
      KVC_LAUNCH_SHARED(attend_kernel<1>, grid, block, kScratch, stream)(a);
    else if (item_heads <= 2)
      KVC_LAUNCH_SHARED(attend_kernel<2>, grid, block, kScratch, stream)(a);
    else if (item_heads <= 4)
      KVC_LAUNCH_SHARED(attend_kernel<4>, grid, block, kScratch, stream)(a);
    else
      KVC_LAUNCH_SHARED(attend_kernel<8>, grid, block, kScratch, stream)(a);
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
