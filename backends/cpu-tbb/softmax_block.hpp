// The arithmetic of attention on the CPU: base-2 online softmax over blocks of keys, for the
// query heads of one KV head together (each K and V row is read once per group).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory_resource>
#include <span>
#include <vector>

#include "cpu_features.hpp"

namespace kvcache::cpu {

// Running state for `group` query heads: a reference point m for the logits (the largest seen,
// or less: the kernels raise it only when a logit passes it by more than kRescaleSlack, so that
// a block seldom pays for a rescale or a horizontal maximum), the sum of the weights
// 2^(logit - m) spread over kLanes partial sums (added a vector at a time), and the weighted
// sum of values.
inline constexpr std::uint32_t kLanes = 16;
inline constexpr float kRescaleSlack = 8.0f;  // weights stay below 2^8
class SoftmaxState {
  // m, l and acc in one allocation (from `memory`: a call's arena, or operator new, thread-safe
  // whatever the process's default resource), or in floats the caller keeps: a call makes a
  // state per work item, and small calls are dominated by such costs. Moves keep the buffer (and
  // so the views); assignments would not (a buffer from another resource is copied), nor are
  // copies needed.
  std::pmr::vector<float> storage_;

 public:
  // The floats a state of `group` heads of dimension `dim` takes.
  static std::size_t floats(std::uint32_t group, std::uint32_t dim) {
    return std::size_t{group} * (1 + kLanes + dim);
  }
  SoftmaxState(std::uint32_t group, std::uint32_t dim,
               std::pmr::memory_resource* memory = std::pmr::new_delete_resource())
      : storage_(floats(group, dim), 0.0f, memory) {
    lay_out(storage_.data(), group, dim);
  }
  // In `memory` (floats(group, dim) of them), which must outlive the state.
  SoftmaxState(std::uint32_t group, std::uint32_t dim, float* memory) {
    std::fill_n(memory, floats(group, dim), 0.0f);
    lay_out(memory, group, dim);
  }
  SoftmaxState(SoftmaxState&&) noexcept = default;
  SoftmaxState& operator=(SoftmaxState&&) = delete;
  SoftmaxState(const SoftmaxState&) = delete;
  SoftmaxState& operator=(const SoftmaxState&) = delete;

  std::span<float> m;
  std::span<float> l;    // [group][kLanes]
  std::span<float> acc;  // [group][dim]

 private:
  // The views from `at` on (zeros there already), m set to -inf.
  void lay_out(float* at, std::uint32_t group, std::uint32_t dim) {
    m = {at, group};
    l = {at + group, std::size_t{group} * kLanes};
    acc = {l.data() + l.size(), std::size_t{group} * dim};
    std::fill(m.begin(), m.end(), -std::numeric_limits<float>::infinity());
  }

 public:
  // The sum of head g's weights.
  float weight_sum(std::uint32_t g) const;
  // Multiplies head g's weights (and what they accumulated) by `factor`.
  void rescale(std::uint32_t g, float factor, std::uint32_t dim);
  // Folds in a state computed over other keys of the same queries: other's heads from
  // first_head on (a tile's state holds several queries' heads).
  void merge(const SoftmaxState& other, std::uint32_t dim, std::uint32_t first_head = 0);
};

// Base-2 logits of a block: logits[g * n + j] = q_g . k_j, with q already scaled by
// scale * log2(e). q: [group][dim], k: [n][dim].
void block_logits(const float* q, std::uint32_t group, std::uint32_t dim, const float* k,
                  std::uint32_t n, float* logits);

// How key or value rows reach BlockAttention: float32 rows, or stored rows read in place (fp16 or
// bf16 codes; int8 or fp8 E4M3 codes with one float scale per row; int4 codes, two per byte, with
// an fp16 scale and minimum per group of 32, 64 or 128 elements).
enum class RowFormat { float32, float16, bfloat16, fp8, int8, int4_g32, int4_g64, int4_g128 };
// The elements per scale group of int4 rows, 0 for the other kinds.
constexpr std::uint32_t int4_group(RowFormat kind) {
  return kind == RowFormat::int4_g32    ? 32
         : kind == RowFormat::int4_g64  ? 64
         : kind == RowFormat::int4_g128 ? 128
                                        : 0;
}
// The kind of int4 rows in groups of `group` elements (32, 64 or 128; float32 for others: decoded).
constexpr RowFormat int4_rows(std::uint32_t group) {
  return group == 32    ? RowFormat::int4_g32
         : group == 64  ? RowFormat::int4_g64
         : group == 128 ? RowFormat::int4_g128
                        : RowFormat::float32;
}
// The kinds read by integer dot products (keys against a quantized query).
constexpr bool integer_rows(RowFormat kind) {
  return kind == RowFormat::int8 || int4_group(kind) != 0;
}
struct RowBlock {
  RowFormat kind = RowFormat::float32;
  const void* rows = nullptr;  // [n][dim]
  const void* meta = nullptr;  // int8 and int4: [n] rows of scales (and minima)
  // The next tile of these rows, asked for into cache a little at a time during the block.
  const std::byte* ahead = nullptr;
  std::size_t ahead_bytes = 0;
};

// The query heads of a KV head in integers for integer dot products with int8 or int4 keys: per
// (head, chunk of kQueryChunk elements) codes = rne(q x 127 / max|q|) with step = max|q| / 127 (0
// where max|q| is under the smallest normal float), so each element is off by at most step / 2.
// Laid out for the kernel family that reads them (see BlockAttention::quantize).
inline constexpr std::uint32_t kQueryChunk = 64;
class QuantizedQuery {
  // The family's arrays in one allocation, as SoftmaxState's (and for the same reasons moved,
  // never assigned): a call quantizes q per (query, KV head).
  std::pmr::vector<float> storage_;

 public:
  // Room for the arrays `isa`'s kernels read (avx2 or avx512), for int4 keys or int8 ones.
  QuantizedQuery(VectorIsa isa, std::uint32_t group, std::uint32_t dim, bool int4_keys,
                 std::pmr::memory_resource* memory);
  QuantizedQuery(QuantizedQuery&&) noexcept = default;
  QuantizedQuery& operator=(QuantizedQuery&&) = delete;
  QuantizedQuery(const QuantizedQuery&) = delete;
  QuantizedQuery& operator=(const QuantizedQuery&) = delete;

  // AVX-512 (vpdpbusd, keys transposed so that lanes are tokens): codes in element order for
  // int8 keys, for int4 keys each head's even elements then its odd ones; the kernels sum
  // products per part of 32 elements (within an int4 group) and take off what the keys' offset
  // adds: int8 keys are read as unsigned (k + 128), int4 ones carry a minimum per group.
  std::span<std::int8_t> codes;  // [group][dim]
  std::span<float> part_steps;   // [group][dim / 32]: the step of the part's chunk
  std::span<float> part_sums;    // [group][dim / 32]: step x the part's code sum (x 128: int8)
  // AVX2 (int16 pairs): codes widened, in element order for int8 keys, for int4 keys each part
  // of 32 as its even elements then its odd ones. The kernels sum products per part of 32
  // elements (within an int4 group) for 8 (head, key) pairs at a time, lane i for head i / (8 /
  // group).
  std::span<std::int16_t> wide_codes;  // [group][dim]
  std::span<float> pair_steps;         // [dim / 32][8]: the step of the part's chunk
  std::span<float> pair_sums;          // int4 keys, [dim / 32][8]: step x the part's code sum
};

struct Block16;
struct PendingValues;
// A pass over a block of 16: keys to weights, or weights and values to the accumulators. Value
// passes take the blocks of a span (see kSpanBlocks): all at once (the AVX-512 int4 pass, given
// whole spans, a last one of 2 or 3 blocks padded with empty blocks, or a lone block; the AVX-512
// int8 pass, spans of kInt8SpanBlocks or a lone block) or one by one.
using Pass16 = void (*)(const Block16&);
using ValuePass = void (*)(const Block16* blocks, std::uint32_t count);

// Adds blocks of keys and values of one shape to softmax states, with kernels chosen once, at
// construction, for the kinds the rows are stored in and the CPU (cpu_features.hpp). It reads
// them in place where it can (head dimension 64 or 128, 1, 2, 4 or 8 query heads per KV head):
// with AVX-512, float kinds, and int8 and int4 by integer dot products where the CPU also has
// VNNI; with AVX2, every kind, int8 and int4 by int16 dot products (vpdpwssd with AVX-VNNI,
// vpmaddwd without). Integer keys meet the quantized query; integer values meet weights rounded
// to int16 (AVX-512 int4 values: to bytes, see kLargestByteWeight). keys() and values() say how
// it wants the rows: the stored kind, or float32 rows decoded first.
class BlockAttention {
 public:
  BlockAttention(std::uint32_t group, std::uint32_t dim, RowFormat stored_keys,
                 RowFormat stored_values);
  RowFormat keys() const { return keys_; }
  RowFormat values() const { return values_; }
  // q ([group][dim] floats) quantized for the kernels of int8 and int4 keys, into `memory` (as
  // SoftmaxState's).
  QuantizedQuery quantize(
      const float* q, std::pmr::memory_resource* memory = std::pmr::new_delete_resource()) const;
  // Adds n keys and values to the state. q: [group][dim] floats, and q8 the same quantized
  // (int8 and int4 keys). `logits` has room for group * n floats. The values of the last blocks
  // may wait in `pending` (one per state, block16.hpp) until their span fills: flush() before
  // the state is read.
  void operator()(const float* q, const QuantizedQuery* q8, const RowBlock& k, const RowBlock& v,
                  std::uint32_t n, SoftmaxState& state, PendingValues& pending,
                  float* logits) const;
  // Slots [begin, end) of a sequence whose keys and values are both read in place (neither side
  // decoded to float32), page by page: page i's K and V tiles (codes, then their meta) are at
  // k_tiles / v_tiles + pages[i] x the tile's bytes, and the tiles `ahead` pages on are asked
  // for meanwhile. The same as operator() per page, with the walk's work done here, in a loop
  // of its own (walked in the caller, around operator(), it was a tenth of an int4 call).
  struct PageRun {
    const std::byte* k_tiles;
    const std::byte* v_tiles;
    std::size_t k_tile_bytes, v_tile_bytes, k_code_bytes, v_code_bytes;
    const std::uint32_t* pages;
    std::uint32_t page_size;
    std::uint64_t begin, end, ahead;
  };
  void operator()(const float* q, const QuantizedQuery* q8, const PageRun& run, SoftmaxState& state,
                  PendingValues& pending, float* logits) const;
  // Adds the values waiting in `pending` to their state.
  void flush(PendingValues& pending) const;

 private:
  void add(const float* q, const QuantizedQuery* q8, const RowBlock& k, const RowBlock& v,
           std::uint32_t n, SoftmaxState& state, PendingValues& pending, float* logits) const;
  // A block's key pass, then the span's value pass when the span is full.
  void run_block(const Block16& block, PendingValues& pending) const;
  void portable(const float* q, const RowBlock& k, const RowBlock& v, std::uint32_t n,
                SoftmaxState& state, float* logits) const;

  std::uint32_t group_, dim_;
  VectorIsa isa_;
  RowFormat keys_, values_;
  Pass16 key_pass_ = nullptr;  // null: the portable path
  ValuePass value_pass_ = nullptr;
  std::uint32_t span_ = 1;  // blocks per value pass
  std::size_t key_bytes_ = 0, key_meta_ = 0, value_bytes_ = 0, value_meta_ = 0;  // per row
};

// 2^x for n floats in place (vectorized where the CPU allows).
void exp2_in_place(float* x, std::uint32_t n);
// out[i] = x[i] x factor for n floats (vectorized where the CPU allows: a call scales its queries
// and its outputs so, which the generic code did four floats at a time).
void scale_into(const float* x, float factor, float* out, std::uint32_t n);

}  // namespace kvcache::cpu
