// A block of 16 keys with their values, what the kernels of every vector family read
// (Block16), and the two passes over it: keys to softmax weights, weights and values to the
// accumulators. Each family (avx512/, avx2/) specializes its passes per shape.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/block_attention.hpp"
#include "kernels/cpu_features.hpp"

#define KVCACHE_INLINE inline __attribute__((always_inline))

namespace kvcache::cpu {

inline constexpr std::uint32_t kMaxDim = 128, kMaxGroup = 8;  // of the specialized shapes
// The most scale bytes a row of the passes carries: int4 in groups of 32, an fp16 scale and
// minimum per group.
inline constexpr std::uint32_t kMaxMetaBytes = kMaxDim / 32 * 4;

// What an fp8 code read as fp16 (see load_floats16) is short of: it multiplies the row's scale.
inline constexpr float kFp8Unit = 256.0f;

// 2^x = 2^n 2^f with n = x rounded and f in [-1/2, 1/2]: 2^f by this degree-5 polynomial (highest
// power first; minimax for the relative error, 7.5e-8, and under 2.5e-7 evaluated in float32).
inline constexpr float kExp2Polynomial[6] = {1.3276471979286704e-3f, 9.6755413342098310e-3f,
                                             5.5507132735430750e-2f, 2.4022119723848650e-1f,
                                             6.9314696706473300e-1f, 1.0000000716546822f};

// Integer value passes but AVX-512 int4's (below): per head, the weights times the rows' scales
// are rounded to int16 against a bound on them (int8: their largest) scaled to kLargestCode, so
// each is off by at most bound / 65534, per block of 16 rows or (AVX-512 int8) per span of up to
// 32 (kInt8SpanBlocks). With int8 codes (|c| <= 127) a span of 32 then errs by at most 32 x 127 /
// 65534 x bound < bound / 16, while the rounding of its rows (half a step each) may cost
// sum(weight x scale) / 2 >= bound / 2: the weights add at most 1/8 to the format's worst case
// (1/16 for a block of 16). The integer sums, exact, are scaled once per block or span.
inline constexpr float kLargestCode = 32767.0f;

// The AVX-512 int4 value pass rounds the weights times the group scales to bytes (vpdpbusd
// takes four rows per instruction, twice vpdpwssd's two), per span (kSpanBlocks) against its
// largest weight times its largest scale: each is off by at most 0.52 of a unit (half of one,
// and 1/50 for making them in 16-bit words first: see the pass's kWeightWord), a unit being 1/255
// of that bound. The codes count from the middle of their range (|code - 8| <= 8: what the
// rounding adds to the weights meets codes centred on zero), so a span's n rows err by at most
// n x 4.16 / 255 of its largest weight times its largest step, and in practice, the roundings
// being independent, by about 4% of it (sqrt(n / 12 x 21.5) units for n = 64): under a tenth
// of int4's own loss, which rounds every element by up to half a step.
inline constexpr float kLargestByteWeight = 255.0f;

// The AVX-512 int4 value pass takes the blocks of a span of kSpanBlocks at once (from one
// page or several), so that what it does per head and group (rounding bounds, minima sums,
// converting its integer sums) is paid once per span; the key passes of a span's blocks run
// first and leave their weights in rows of kSpan per head. The AVX-512 int8 pass takes spans of
// kInt8SpanBlocks (see kLargestCode): its weights rounded, its sums converted and added to the
// accumulators once per two blocks (measured faster than per block).
inline constexpr std::uint32_t kSpanBlocks = 4, kSpan = 16 * kSpanBlocks, kInt8SpanBlocks = 2;

// What the passes over a block read: q (float, or quantized for int8/int4 keys), 16 key rows
// (zeros past n), n value rows (for the integer passes, rows of zeros pad them to a multiple of
// 4), the tiles to prefetch, and the softmax state of the G heads.
struct Block16 {
  const float* q;
  const QuantizedQuery* q8;
  const void* k;
  const void* k_meta;  // scales (fp8, int8, int4 keys): 16 rows
  const void* v;
  const void* v_meta;  // scales (fp8, int8, int4 values): 16 rows, zeros past n
  std::uint32_t n;
  struct Ahead {
    const std::byte* from;
    std::uint32_t lines;
  } ahead[2];  // lines of the next K and V tiles asked for here
  float* m;
  float* l;
  float* acc;
  // Head g's 16 weights in token order at weight + kSpan x g (aligned), from the key pass for the
  // value pass; the `earlier` weights before them in the row are those of the span's earlier
  // blocks, still waiting for their value pass: a key pass that raises m rescales them too.
  float* weight;
  std::uint32_t earlier;
};

// Blocks whose value pass waits for their span to fill: the blocks, their weights ([G] rows of
// kSpan, all made against the head's current m) and, for blocks of other than a multiple of 4
// rows, their value rows copied with rows of zeros after them, and for partial blocks, their
// value scales copied with zeros after them.
struct PendingValues {
  Block16 blocks[kSpanBlocks];
  std::uint32_t count = 0;
  alignas(64) float weight[kMaxGroup * kSpan];
  alignas(64) std::byte padded[kSpanBlocks][16 * kMaxDim];
  alignas(64) std::byte padded_meta[kSpanBlocks][16 * kMaxMetaBytes];
};

// Asks for shares [first, first + count) (of 32) of the prefetch lines, so they spread through
// the compute instead of leaving in one burst that overflows the L1 miss buffers: the key pass
// asks for shares 0..15, the value pass for 16..31 (one per row). Shares are equal parts of a
// tile's lines (a tile of 20 or 33 lines is not front-loaded into the key pass). Into L2 (hint
// 2), which leaves the L1 miss buffers to the loads (int8 faster than with hint 3).
inline constexpr std::uint32_t kShares = 32;
KVCACHE_INLINE void prefetch_shares(const Block16& b, std::uint32_t first, std::uint32_t count) {
  for (const Block16::Ahead& a : b.ahead)
    for (std::uint32_t i = first * a.lines / kShares; i < (first + count) * a.lines / kShares; ++i)
      __builtin_prefetch(a.from + std::size_t{i} * 64, 0, 2);
}
// The key pass's shares for head (or pass) g of G: its half, or all of them where the value pass
// runs once per span (AVX-512 int4: it would ask for four blocks' shares at once, later than the
// key pass can).
template <int G, std::uint32_t Shares = kShares / 2>
KVCACHE_INLINE void prefetch_key_shares(const Block16& b, int g) {
  prefetch_shares(b, static_cast<std::uint32_t>(g) * Shares / G, Shares / G);
}

// A value pass for the blocks of a span that goes through them one by one.
template <Pass16 Pass>
void each_block(const Block16* blocks, std::uint32_t count) {
  for (std::uint32_t i = 0; i < count; ++i) Pass(blocks[i]);
}

// The passes for G query heads per KV head and head dimension D (G of 1, 2, 4 or 8; D of 64 or
// 128), or null; defined in each family's key_passes.cpp and value_passes.cpp. The AVX2 family
// has integer passes with and without AVX-VNNI.
namespace avx512 {
Pass16 key_pass(std::uint32_t group, std::uint32_t dim, RowFormat keys);
ValuePass value_pass(std::uint32_t group, std::uint32_t dim, RowFormat values);
}  // namespace avx512
namespace avx2 {
Pass16 key_pass(std::uint32_t group, std::uint32_t dim, RowFormat keys, bool vnni);
ValuePass value_pass(std::uint32_t group, std::uint32_t dim, RowFormat values, bool vnni);
}  // namespace avx2

// The pass for rows of `kind` and head dimension D: floats.template operator()<R>() for the kinds
// read as floats, `int8`, or int4.template operator()<S>() for int4 in groups of S elements (null
// where S passes D).
template <int D, class Pass, class Floats, class Int4>
Pass for_kind(RowFormat kind, Floats floats, Pass int8, Int4 int4) {
  switch (kind) {
    case RowFormat::float32:
      return floats.template operator()<RowFormat::float32>();
    case RowFormat::float16:
      return floats.template operator()<RowFormat::float16>();
    case RowFormat::bfloat16:
      return floats.template operator()<RowFormat::bfloat16>();
    case RowFormat::fp8:
      return floats.template operator()<RowFormat::fp8>();
    case RowFormat::int8:
      return int8;
    case RowFormat::int4_g32:
      return int4.template operator()<32>();
    case RowFormat::int4_g64:
      return int4.template operator()<64>();
    case RowFormat::int4_g128:
      if constexpr (D >= 128) return int4.template operator()<128>();
      return nullptr;
  }
  return nullptr;
}

// The head dimensions the passes are specialized for (with groups of 1, 2, 4 and 8 query heads,
// and on AVX2 any group of 1 to 8).
constexpr bool specialized_dim(std::uint32_t dim) {
  return dim == 64 || dim == 128;
}

// Whether a family's passes take any group of 1 to 8 query heads (AVX2: 8 / G keys at a time,
// rounded down) or only 1, 2, 4 and 8 (AVX-512: 16 / G keys at a time; head_groups.hpp pads the
// others, as for the portable path).
constexpr bool takes_any_group(VectorIsa family) {
  return family == VectorIsa::avx2;
}

// pick.template operator()<G, D>() for a shape Family's passes are specialized for, or null.
template <VectorIsa Family, class Pass = Pass16, class Pick>
Pass for_shape(std::uint32_t group, std::uint32_t dim, Pick pick) {
  const auto with_dim = [&]<int D>() -> Pass {
    const auto with_group = [&]<int G>() -> Pass {
      if constexpr (takes_any_group(Family) || (G & (G - 1)) == 0)
        return pick.template operator()<G, D>();
      return nullptr;
    };
    switch (group) {
      case 1:
        return with_group.template operator()<1>();
      case 2:
        return with_group.template operator()<2>();
      case 3:
        return with_group.template operator()<3>();
      case 4:
        return with_group.template operator()<4>();
      case 5:
        return with_group.template operator()<5>();
      case 6:
        return with_group.template operator()<6>();
      case 7:
        return with_group.template operator()<7>();
      case 8:
        return with_group.template operator()<8>();
      default:
        return nullptr;
    }
  };
  if (dim == 64) return with_dim.template operator()<64>();
  if (dim == 128) return with_dim.template operator()<128>();
  return nullptr;
}

}  // namespace kvcache::cpu
