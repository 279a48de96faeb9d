// The GPU kernels as the host code sees them: plain argument structs and one launcher each,
// enqueued on a stream. Defined in kernels.cu, which nvcc (CUDA) or hipcc (HIP) compiles; the
// rest of the backend is ordinary C++.
#pragma once

#include <cstdint>

#include "device_codec.hpp"
#include "gpu_runtime.hpp"

namespace kvcache::gpu {

// Where a store's tiles are: layer l's K pool at pools + l * layer_stride, its V pool
// k_pool_bytes later; each pool is [page][kv_head] tiles.
struct PoolLayout {
  std::uint8_t* pools = nullptr;
  std::uint64_t layer_stride = 0;
  std::uint64_t k_pool_bytes = 0;
  std::uint32_t kv_heads = 0;
  std::uint32_t head_dim = 0;
  DeviceFormat k, v;

  // Layer `layer`'s K or V pool; for either host or device code.
  KVC_HD std::uint8_t* pool(std::uint32_t layer, bool value) const {
    return pools + layer * layer_stride + (value ? k_pool_bytes : 0);
  }
  // The tile of (page, KV head) in a pool of format f.
  KVC_HD std::uint8_t* tile_in(std::uint8_t* pool, const DeviceFormat& f, std::uint32_t page,
                               std::uint32_t head) const {
    return pool + (std::uint64_t{page} * kv_heads + head) * f.tile_stride();
  }
  // The tile of (layer, page, KV head) in the K or V pool.
  KVC_HD std::uint8_t* tile(std::uint32_t layer, std::uint32_t page, std::uint32_t head,
                            bool value) const {
    return tile_in(pool(layer, value), value ? v : k, page, head);
  }
};

// Element types of tensors crossing the API.
enum class Dtype : std::uint32_t { f32, f16, bf16 };

// Encodes rows [rows, kv_heads, head_dim] of K and V into their slots of one layer (the sides
// whose format encodes rows; see GroupEncodeArgs for kivi-k).
struct EncodeArgs {
  PoolLayout pools;
  std::uint32_t layer = 0;
  std::uint64_t rows = 0;
  const void* k = nullptr;
  const void* v = nullptr;
  Dtype k_dtype = Dtype::f32, v_dtype = Dtype::f32;
  const std::uint32_t* row_page = nullptr;  // [rows]
  const std::uint32_t* row_slot = nullptr;  // [rows]
};
void launch_encode(const EncodeArgs& a, GPU(Stream_t) stream);

// For a format that groups tokens (kivi-k), on one side (K or V): encodes complete groups. Row r
// of group i comes from source[i * group + r]: an input row index when >= 0, else residual row
// -(source + 1) of `residual` ([rows][kv_heads][head_dim] fp16, the rows that waited). `scratch`
// holds groups * kv_heads * group * head_dim floats.
struct GroupEncodeArgs {
  PoolLayout pools;
  std::uint32_t layer = 0;
  bool value = false;
  std::uint32_t groups = 0;
  const void* input = nullptr;  // [rows, kv_heads, head_dim]
  Dtype dtype = Dtype::f32;
  const std::int64_t* source = nullptr;
  const std::uint16_t* residual = nullptr;
  const std::uint32_t* group_page = nullptr;  // [groups]
  const std::uint32_t* group_slot = nullptr;  // first slot of each group within its page
  float* scratch = nullptr;
};
void launch_group_encode(const GroupEncodeArgs& a, GPU(Stream_t) stream);

// Decodes slots into float32 rows [n, kv_heads, head_dim] of K and V.
struct DecodeArgs {
  PoolLayout pools;
  std::uint32_t layer = 0;
  std::uint64_t rows = 0;
  float* k = nullptr;
  float* v = nullptr;
  const std::uint32_t* row_page = nullptr;
  const std::uint32_t* row_slot = nullptr;
};
void launch_decode(const DecodeArgs& a, GPU(Stream_t) stream);

// Fills slots [from_slot, page_size) of every tile of one page with 0xFF (all of it from 0).
void launch_poison(const PoolLayout& pools, std::uint32_t layers, std::uint32_t page_size,
                   std::uint32_t page, std::uint32_t from_slot, GPU(Stream_t) stream);

// Moves slots (codes and meta of every layer, head, K and V) through `scratch`, which holds
// moves * slot_bytes(pools, layers): every source is read before any destination is written.
struct SlotMoveArgs {
  PoolLayout pools;
  std::uint32_t layers = 0;
  std::uint32_t moves = 0;
  const std::uint32_t* from_page = nullptr;  // [moves] each
  const std::uint32_t* from_slot = nullptr;
  const std::uint32_t* to_page = nullptr;
  const std::uint32_t* to_slot = nullptr;
  std::uint8_t* scratch = nullptr;
};
std::uint64_t slot_bytes(const PoolLayout& pools, std::uint32_t layers);
void launch_move_slots(const SlotMoveArgs& a, GPU(Stream_t) stream);

// Paged attention, one launch a layer. Work items are (query, kv head, heads of its group
// [head0, head0 + heads), a run of its visible slots). A merge unit is (query, kv head, a chunk of
// kMaxItemHeads heads of its group): its items are contiguous, and the unit's last item to finish
// merges their partial softmax states into the output (merge_states.cuh).
struct WorkItem {
  std::uint32_t query;
  std::uint32_t kv_head;
  std::uint32_t head0;  // first query head, within the group: a multiple of kMaxItemHeads
  std::uint32_t heads;  // at most kMaxItemHeads
  std::uint32_t first;  // index among the query's visible slots
  std::uint32_t count;
  std::uint32_t rotation;  // the query turned by this rotation + 1 for all its slots; 0: as given
};
inline constexpr std::uint32_t kMaxItemHeads = 8;
inline constexpr std::uint32_t kMaxHeadDim = 256;
inline constexpr std::uint32_t kHeadDimStep = 8;  // lanes read rows in chunks of 8 elements
inline constexpr std::uint32_t kItemSlots = 128;  // a work item's least slots: a tile per warp
inline constexpr std::uint32_t kMaxPageSize = 1u << 24;  // the kernel packs slots in 24 bits

// Floats of an item's partial state: per head (max, sum, values[dim]), rounded up to 128 bytes so
// that no cache line holds two items' states (merges read them past the L1; the states start on
// a 128-byte boundary of the device buffer, whose base the runtime aligns to 256).
KVC_HD constexpr std::uint64_t item_state_floats(std::uint32_t dim) {
  return (std::uint64_t{kMaxItemHeads} * (2 + dim) + 31) / 32 * 32;
}

struct AttentionArgs {
  PoolLayout pools;
  std::uint32_t layer = 0;
  std::uint32_t page_size = 0;
  std::uint32_t q_heads = 0;
  float scale = 0.0f;       // log2(e) / sqrt(head_dim) or the caller's, times log2(e)
  const void* q = nullptr;  // [queries, q_heads, head_dim]
  Dtype q_dtype = Dtype::f32;
  // The turned queries of items with a rotation, [rotation][q_heads][head_dim] (see RotateArgs).
  const float* turned = nullptr;
  // Per query: its sequence's pages at pages + page_offset[query], and its visible slots as
  // spans [span_offset[query], span_offset[query + 1]) of (begin, end) pairs.
  const std::uint32_t* pages = nullptr;
  const std::uint64_t* page_offset = nullptr;
  const std::uint32_t* span_offset = nullptr;
  const std::uint64_t* spans = nullptr;
  const WorkItem* items = nullptr;
  std::uint32_t n_items = 0;
  // For a format that groups tokens: per query, K then V, the first slot still held in fp16
  // residual rows (UINT64_MAX when none), and where its sequence's rows of this layer are, at
  // residual + residual_offset[2 * query + side] as [kv_head][group][head_dim].
  const std::uint64_t* held_from = nullptr;
  const std::uint16_t* residual = nullptr;
  const std::uint64_t* residual_offset = nullptr;
  // Per item (item_state_floats apart) and head of the item: max, sum and weighted values [dim].
  float* partial = nullptr;
  // Per merge unit: its items [first_item[unit], first_item[unit + 1]), and how many of them have
  // written their state in this launch (zero before the launch; the unit's last item resets it).
  const std::uint32_t* first_item = nullptr;
  std::uint32_t* arrived = nullptr;
  void* out = nullptr;  // [queries, q_heads, head_dim] in out_dtype
  Dtype out_dtype = Dtype::f32;
  float* final_state = nullptr;  // when not null: per (query, q head) the final max and sum
  // When scores are wanted (else null): base-2 logits of query i at logits + offset[i] * q_heads,
  // [q_head][visible index], where offset (queries + 1 entries) sums the visible slot counts.
  float* logits = nullptr;
  const std::uint64_t* logit_offset = nullptr;
  // The staged kernel's buffers per warp (staged_attention.cuh; set by its launcher).
  std::uint32_t stages = 2;
};
// item_heads: the most query heads of any item (sizes the kernel's registers).
void launch_attend(const AttentionArgs& a, std::uint32_t item_heads, GPU(Stream_t) stream);

// The queries turned for some of their ranges (RoPE positions within the cache, see
// kvcache/query_rotation.hpp): turned[r][head] is q[query_of[r]][head] with its first rotary_dims
// elements rotated in pairs by rotation r's cosines and sines (cos_sin[r * rotary_dims ...]).
struct RotateArgs {
  const void* q = nullptr;
  Dtype q_dtype = Dtype::f32;
  std::uint32_t q_heads = 0;
  std::uint32_t head_dim = 0;
  std::uint32_t rotary_dims = 0;
  bool adjacent = false;  // pairs 2i, 2i + 1 (gptj); else i, i + rotary_dims / 2 (neox)
  std::uint32_t rotations = 0;
  const std::uint32_t* query_of = nullptr;  // [rotations]
  const float* cos_sin = nullptr;           // [rotations][rotary_dims]
  float* turned = nullptr;                  // [rotations][q_heads][head_dim]
};
void launch_rotate(const RotateArgs& a, GPU(Stream_t) stream);

// Adds each visible slot's softmax weight, summed over the query heads, to scores[slot] of the
// query's sequence (at scores + score_offset[query]).
struct ScoreArgs {
  std::uint32_t queries = 0;
  std::uint32_t q_heads = 0;
  const std::uint32_t* span_offset = nullptr;
  const std::uint64_t* spans = nullptr;
  const std::uint64_t* logit_offset = nullptr;  // as in AttentionArgs
  std::uint64_t max_visible = 0;                // of any query
  const float* logits = nullptr;
  const float* final_state = nullptr;
  float* scores = nullptr;
  const std::uint64_t* score_offset = nullptr;
};
void launch_scores(const ScoreArgs& a, GPU(Stream_t) stream);

}  // namespace kvcache::gpu
