#include "kernels/block_attention.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/block16.hpp"

namespace kvcache::cpu {
namespace {

// The key or value pass over rows of this kind for the shape, or null: with AVX-512, float
// kinds, and int8 and int4 where the CPU also has VNNI; with AVX2, every kind.
template <bool Value>
std::conditional_t<Value, ValuePass, Pass16> pass_for(VectorIsa isa, std::uint32_t group,
                                                      std::uint32_t dim, RowFormat kind) {
  switch (isa) {
    case VectorIsa::avx512:
      if (integer_rows(kind) && !has_vnni()) return nullptr;
      if constexpr (Value)
        return avx512::value_pass(group, dim, kind);
      else
        return avx512::key_pass(group, dim, kind);
    case VectorIsa::avx2:
      if constexpr (Value)
        return avx2::value_pass(group, dim, kind, has_vnni());
      else
        return avx2::key_pass(group, dim, kind, has_vnni());
    case VectorIsa::portable:
      return nullptr;
  }
  return nullptr;
}

std::size_t row_bytes(RowFormat kind, std::uint32_t dim) {
  switch (kind) {
    case RowFormat::float32:
      return dim * 4;
    case RowFormat::float16:
    case RowFormat::bfloat16:
      return dim * 2;
    case RowFormat::fp8:
    case RowFormat::int8:
      return dim;
    case RowFormat::int4_g32:
    case RowFormat::int4_g64:
    case RowFormat::int4_g128:
      return dim / 2;
  }
  return 0;
}
std::size_t meta_bytes(RowFormat kind, std::uint32_t dim) {
  if (kind == RowFormat::int8 || kind == RowFormat::fp8) return 4;
  return int4_group(kind) != 0 ? dim / int4_group(kind) * 4 : 0;
}

}  // namespace

// Asked for only where there are integer key passes: the AVX2 family's or AVX-512 with VNNI.
QuantizedQuery BlockAttention::quantize(const float* q, std::pmr::memory_resource* memory) const {
  const std::uint32_t group = group_, dim = dim_, parts = dim / 32;
  QuantizedQuery out(isa_, group, dim, int4_group(keys_) != 0, memory);
  if (isa_ == VectorIsa::avx512) {
    // Parts are [group][dim / 32] in both; int8 keys' sums carry their offset's 128.
    avx512::quantize_query(q, group, dim, keys_ != RowFormat::int8,
                           keys_ == RowFormat::int8 ? 128.0f : 1.0f, out.codes.data(),
                           out.part_steps.data(), out.part_sums.data());
    return out;
  }

  // AVX2, per head: codes in element order, each part's step (that of its chunk) and code sum.
  std::int8_t codes[kMaxDim];
  float step_of[kMaxDim / 32];
  std::int32_t sum_of[kMaxDim / 32];
  for (std::uint32_t h = 0; h < group; ++h) {
    for (std::uint32_t chunk = 0; chunk < dim / kQueryChunk; ++chunk) {
      const float step = avx2::quantize_chunk(q + std::size_t{h} * dim + chunk * kQueryChunk,
                                              codes + chunk * kQueryChunk);
      for (std::uint32_t p = 0; p < kQueryChunk / 32; ++p)
        step_of[chunk * kQueryChunk / 32 + p] = step;
    }
    for (std::uint32_t p = 0; p < parts; ++p) {
      sum_of[p] = 0;
      for (std::uint32_t e = 32 * p; e < 32 * p + 32; ++e) sum_of[p] += codes[e];
    }
    std::int16_t* wide = out.wide_codes.data() + std::size_t{h} * dim;
    for (std::uint32_t e = 0; e < dim; ++e) {
      const std::uint32_t at =
          keys_ == RowFormat::int8 ? e : e / 32 * 32 + e % 2 * 16 + e % 32 / 2;  // see keys16_int
      wide[at] = codes[e];
    }
    // Lanes i of the pair arrays are head i / (8 / group)'s.
    for (std::uint32_t p = 0; p < parts; ++p)
      for (std::uint32_t lane = h * (8 / group); lane < (h + 1) * (8 / group); ++lane) {
        out.pair_steps[p * 8 + lane] = step_of[p];
        if (int4_group(keys_) != 0)
          out.pair_sums[p * 8 + lane] = step_of[p] * static_cast<float>(sum_of[p]);
      }
  }
  return out;
}

BlockAttention::BlockAttention(std::uint32_t group, std::uint32_t dim, RowFormat stored_keys,
                               RowFormat stored_values)
    : group_(group), dim_(dim), isa_(vector_isa()) {
  // Each side read in place where a pass can, else decoded to float32; the portable path where
  // the shape or the CPU has no passes at all.
  const auto choose = [&]<bool Value>(RowFormat stored, RowFormat& kind, auto& pass) {
    kind = stored;
    pass = pass_for<Value>(isa_, group, dim, stored);
    if (pass == nullptr) pass = pass_for<Value>(isa_, group, dim, kind = RowFormat::float32);
  };
  choose.template operator()<false>(stored_keys, keys_, key_pass_);
  choose.template operator()<true>(stored_values, values_, value_pass_);
  if (key_pass_ == nullptr || value_pass_ == nullptr) {
    keys_ = values_ = RowFormat::float32;
    key_pass_ = nullptr;
    value_pass_ = nullptr;
  }
  // The AVX-512 int8 and int4 value passes take spans (see kSpanBlocks and kLargestCode).
  if (isa_ == VectorIsa::avx512 && values_ == RowFormat::int8) span_ = kInt8SpanBlocks;
  if (isa_ == VectorIsa::avx512 && int4_group(values_) != 0) span_ = kSpanBlocks;
  key_bytes_ = row_bytes(keys_, dim);
  key_meta_ = meta_bytes(keys_, dim);
  value_bytes_ = row_bytes(values_, dim);
  value_meta_ = meta_bytes(values_, dim);
}

namespace {
// The block at pending.count, for `rows` rows from these, asking for these lines of the next
// tiles. Field by field: an aggregate assignment zero-fills the block first (a `rep stos`, about
// a third of add's time in a profile).
__attribute__((always_inline)) inline Block16& make_block(
    const float* q, const QuantizedQuery* q8, const void* k_rows, const void* k_meta,
    const void* v_rows, const void* v_meta, std::uint32_t rows, Block16::Ahead k_ahead,
    Block16::Ahead v_ahead, SoftmaxState& state, PendingValues& pending) {
  const std::uint32_t place = pending.count;
  Block16& block = pending.blocks[place];
  block.q = q;
  block.q8 = q8;
  block.k = k_rows;
  block.k_meta = k_meta;
  block.v = v_rows;
  block.v_meta = v_meta;
  block.n = rows;
  block.ahead[0] = k_ahead;
  block.ahead[1] = v_ahead;
  block.m = state.m.data();
  block.l = state.l.data();
  block.acc = state.acc.data();
  block.weight = pending.weight + 16 * place;
  block.earlier = 16 * place;
  return block;
}
}  // namespace

__attribute__((always_inline)) inline void BlockAttention::run_block(const Block16& block,
                                                                     PendingValues& pending) const {
  key_pass_(block);
  if (++pending.count == span_) flush(pending);
}

// Inlined into both entry points: a page run then pays for no call and no stack frame per
// page.
__attribute__((always_inline)) inline void BlockAttention::add(
    const float* q, const QuantizedQuery* q8, const RowBlock& k, const RowBlock& v, std::uint32_t n,
    SoftmaxState& state, PendingValues& pending, float* logits) const {
  if (key_pass_ == nullptr) {
    portable(q, k, v, n, state, logits);
    return;
  }
  const auto* keys = static_cast<const std::byte*>(k.rows);
  const auto* values = static_cast<const std::byte*>(v.rows);
  const std::uint32_t blocks = (n + 15) / 16;
  const auto lines = [](const RowBlock& r) {
    return static_cast<std::uint32_t>(r.ahead == nullptr ? 0 : r.ahead_bytes / 64);
  };
  // A whole block by the shortest way, without the loop's shares and padding (as page runs take
  // their whole pages of 16, below; here for rows decoded to float32 a page at a time).
  if (n == 16) {
    run_block(make_block(q, q8, keys, k.meta, values, v.meta, 16, {k.ahead, lines(k)},
                         {v.ahead, lines(v)}, state, pending),
              pending);
    return;
  }
  const std::uint32_t ahead_lines[2] = {lines(k), lines(v)};
  // The kernels read 16 key rows: a partial block's are copied and padded with zeros (finite;
  // their weight is 0).
  alignas(64) std::byte pad[16 * kMaxDim * 4], pad_meta[16 * kMaxMetaBytes];
  for (std::uint32_t b = 0; b < blocks; ++b) {
    const std::uint32_t j = 16 * b, rows = std::min(16u, n - j), place = pending.count;
    // Each block asks for its share of the next tiles.
    Block16::Ahead ahead[2];
    const RowBlock* sides[2] = {&k, &v};
    for (int i = 0; i < 2; ++i) {
      const std::uint32_t all = ahead_lines[i];
      const std::uint32_t first = blocks == 1 ? 0 : all * b / blocks;
      const std::uint32_t end = blocks == 1 ? all : all * (b + 1) / blocks;
      ahead[i] = {sides[i]->ahead + std::size_t{first} * 64, end - first};
    }
    Block16& block = make_block(
        q, q8, keys + j * key_bytes_, static_cast<const std::byte*>(k.meta) + j * key_meta_,
        values + j * value_bytes_, static_cast<const std::byte*>(v.meta) + j * value_meta_, rows,
        ahead[0], ahead[1], state, pending);
    if (rows < 16) {
      std::memcpy(pad, block.k, rows * key_bytes_);
      std::memset(pad + rows * key_bytes_, 0, (16 - rows) * key_bytes_);
      block.k = pad;
      if (key_meta_ > 0) {
        std::memcpy(pad_meta, block.k_meta, rows * key_meta_);
        std::memset(pad_meta + rows * key_meta_, 0, (16 - rows) * key_meta_);
        block.k_meta = pad_meta;
      }
    }
    // So are its value scales (read 16 at a time); they live until the block's value pass.
    if (rows < 16 && value_meta_ > 0) {
      std::byte* meta = pending.padded_meta[place];
      std::memcpy(meta, block.v_meta, rows * value_meta_);
      std::memset(meta + rows * value_meta_, 0, (16 - rows) * value_meta_);
      block.v_meta = meta;
    }
    // The integer value passes read rows in pairs or fours: a block of other sizes has its rows
    // copied and followed by rows of zeros.
    if (rows % 4 != 0 && integer_rows(values_)) {
      std::byte* padded = pending.padded[place];
      std::memcpy(padded, block.v, rows * value_bytes_);
      std::memset(padded + rows * value_bytes_, 0, (4 - rows % 4) * value_bytes_);
      block.v = padded;
    }
    run_block(block, pending);
  }
}

void BlockAttention::operator()(const float* q, const QuantizedQuery* q8, const RowBlock& k,
                                const RowBlock& v, std::uint32_t n, SoftmaxState& state,
                                PendingValues& pending, float* logits) const {
  add(q, q8, k, v, n, state, pending, logits);
}

void BlockAttention::operator()(const float* q, const QuantizedQuery* q8, const PageRun& run,
                                SoftmaxState& state, PendingValues& pending, float* logits) const {
  const std::uint64_t page = run.page_size;
  for (std::uint64_t b = run.begin, index = b / page; b < run.end; ++index) {
    const std::uint64_t e = std::min(run.end, (index + 1) * page);
    const auto first = static_cast<std::uint32_t>(b - index * page);
    const std::size_t at = run.pages[index];
    const std::byte* k = run.k_tiles + at * run.k_tile_bytes;
    const std::byte* v = run.v_tiles + at * run.v_tile_bytes;
    // The tiles `run.ahead` pages on, if the run reaches them.
    const bool ahead = (index + run.ahead) * page < run.end;
    const std::size_t ahead_at = ahead ? run.pages[index + run.ahead] : 0;
    const std::byte* k_ahead = ahead ? run.k_tiles + ahead_at * run.k_tile_bytes : nullptr;
    const std::byte* v_ahead = ahead ? run.v_tiles + ahead_at * run.v_tile_bytes : nullptr;
    // A whole page of 16 slots (the default size) is one block, made here from its tiles rather
    // than slot by slot through add.
    if (e - b == 16 && first == 0 && key_pass_ != nullptr) {
      const auto k_lines = static_cast<std::uint32_t>(ahead ? run.k_tile_bytes / 64 : 0);
      const auto v_lines = static_cast<std::uint32_t>(ahead ? run.v_tile_bytes / 64 : 0);
      run_block(make_block(q, q8, k, k + run.k_code_bytes, v, v + run.v_code_bytes, 16,
                           {k_ahead, k_lines}, {v_ahead, v_lines}, state, pending),
                pending);
      b = e;
      continue;
    }
    add(q, q8,
        {keys_, k + first * key_bytes_, k + run.k_code_bytes + first * key_meta_, k_ahead,
         run.k_tile_bytes},
        {values_, v + first * value_bytes_, v + run.v_code_bytes + first * value_meta_, v_ahead,
         run.v_tile_bytes},
        static_cast<std::uint32_t>(e - b), state, pending, logits);
    b = e;
  }
}

void BlockAttention::flush(PendingValues& pending) const {
  if (pending.count == 0) return;
  // A span's pass takes whole spans or a lone block: a last span of 2 or 3 blocks is padded
  // with blocks of no rows and no weight.
  const std::uint32_t blocks = pending.count == 1 ? 1 : span_;
  for (std::uint32_t k = pending.count; k < blocks; ++k) {
    Block16& empty = pending.blocks[k];
    empty = pending.blocks[0];
    empty.n = 0;
    empty.weight = pending.weight + 16 * k;
    for (std::uint32_t g = 0; g < group_; ++g)
      std::fill_n(empty.weight + std::size_t{kSpan} * g, 16, 0.0f);
  }
  value_pass_(pending.blocks, blocks);
  pending.count = 0;
}

}  // namespace kvcache::cpu
