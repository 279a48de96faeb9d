// Attention over blocks of keys and values for the query heads of one KV head together (each K and
// V row read once per group), base-2 online softmax (softmax_state.hpp), with kernels chosen once
// per shape, row kinds and CPU: the passes of the vector families (block16.hpp, avx512/, avx2/),
// or the portable path (portable_path.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory_resource>

#include "kernels/cpu_features.hpp"
#include "kernels/quantized_query.hpp"
#include "kernels/row_format.hpp"
#include "kernels/softmax_state.hpp"

namespace kvcache::cpu {

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
// them in place where it can (head dimension 64 or 128; 1, 2, 4 or 8 query heads per KV head,
// with AVX2 any of 1 to 8):
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

}  // namespace kvcache::cpu
