#include "softmax_block.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>

#include "avx2/vectors.hpp"
#include "avx512/vectors.hpp"
#include "block16.hpp"

namespace kvcache::cpu {
namespace {

using namespace avx512;

KVCACHE_KERNELS_BEGIN

// out[i] = op(x[i], ...) for n floats of each input, 16 at a time and a masked tail (out may be
// one of the inputs).
template <class Op, class... Inputs>
KVCACHE_AVX512 KVCACHE_INLINE void map_avx512_n(float* out, std::uint32_t n, Op op,
                                                const Inputs*... x) {
  std::uint32_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, op(_mm512_loadu_ps(x + i)...));
  if (i < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(out + i, tail, op(_mm512_maskz_loadu_ps(tail, x + i)...));
  }
}
// The operations mapped (functors: a lambda's operator() would not get the AVX-512 target).
struct Exp2 {
  KVCACHE_AVX512 KVCACHE_INLINE __m512 operator()(__m512 v) const { return exp2_avx512(v); }
};
struct Times {
  __m512 factor;
  KVCACHE_AVX512 KVCACHE_INLINE __m512 operator()(__m512 v) const {
    return _mm512_mul_ps(v, factor);
  }
};
struct Mix {  // a x mine + b x theirs
  __m512 mine, theirs;
  KVCACHE_AVX512 KVCACHE_INLINE __m512 operator()(__m512 a, __m512 b) const {
    return _mm512_fmadd_ps(b, theirs, _mm512_mul_ps(a, mine));
  }
};
KVCACHE_AVX512 void exp2_avx512_n(float* x, std::uint32_t n) {
  map_avx512_n(x, n, Exp2{}, x);
}
KVCACHE_AVX512 void scale_avx512_n(const float* x, float factor, float* out, std::uint32_t n) {
  map_avx512_n(out, n, Times{_mm512_set1_ps(factor)}, x);
}
// x = x * mine + other * theirs for n floats (other does not overlap x).
KVCACHE_AVX512 void mix_avx512_n(float* x, float mine, const float* other, float theirs,
                                 std::uint32_t n) {
  map_avx512_n(x, n, Mix{_mm512_set1_ps(mine), _mm512_set1_ps(theirs)}, x, other);
}

KVCACHE_AVX512 void logits_avx512(const float* q, std::uint32_t group, std::uint32_t dim,
                                  const float* k, std::uint32_t n, float* logits) {
  for (std::uint32_t j = 0; j < n; ++j) {
    const float* kj = k + std::size_t{j} * dim;
    for (std::uint32_t g = 0; g < group; ++g) {
      const float* qg = q + std::size_t{g} * dim;
      __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
      std::uint32_t i = 0;
      for (; i + 32 <= dim; i += 32) {
        a = _mm512_fmadd_ps(_mm512_loadu_ps(qg + i), _mm512_loadu_ps(kj + i), a);
        b = _mm512_fmadd_ps(_mm512_loadu_ps(qg + i + 16), _mm512_loadu_ps(kj + i + 16), b);
      }
      if (i < dim) a = _mm512_fmadd_ps(_mm512_loadu_ps(qg + i), _mm512_loadu_ps(kj + i), a);
      logits[std::size_t{g} * n + j] = _mm512_reduce_add_ps(_mm512_add_ps(a, b));
    }
  }
}

KVCACHE_AVX512 void accumulate_avx512(const float* weights, std::uint32_t group, std::uint32_t dim,
                                      const float* v, std::uint32_t n, float* acc) {
  for (std::uint32_t g = 0; g < group; ++g) {
    float* ag = acc + std::size_t{g} * dim;
    for (std::uint32_t i = 0; i < dim; i += 16) {
      __m512 a = _mm512_loadu_ps(ag + i);
      for (std::uint32_t j = 0; j < n; ++j)
        a = _mm512_fmadd_ps(_mm512_set1_ps(weights[std::size_t{g} * n + j]),
                            _mm512_loadu_ps(v + std::size_t{j} * dim + i), a);
      _mm512_storeu_ps(ag + i, a);
    }
  }
}

KVCACHE_KERNELS_END

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

// A chunk (kQueryChunk elements) of q quantized, alike in both families: step = max|x| / 127 and
// codes[i] = rne(x[i] x 127 / max|x|), all 0 where max|x| is under the smallest normal float
// (127 / max|x| would overflow). A multiplication rather than a division per element (decodes
// of 16 tokens 3-5% faster). zero_chunk: whether a chunk of this max|x| (or NaN) is all zeros.
bool zero_chunk(float top) {
  return !(top >= std::numeric_limits<float>::min());
}
KVCACHE_KERNELS_BEGIN
// q ([group][dim]) for the AVX-512 integer key passes (see QuantizedQuery): per head its codes, in
// element order (int8 keys) or its even elements then its odd ones (int4), and per part of 32
// elements the step and step x the code sum x sum_unit. All chunks at once (group x dim /
// kQueryChunk, at most 16): their largest magnitudes by one lane network and their steps and scales
// by one vector division each, instead of a horizontal maximum and two scalar divisions per chunk;
// the rest in vectors too (the generic code's scalar sums and strided copies took as long as the
// quantization).
KVCACHE_AVX512 void quantize_avx512(const float* q, std::uint32_t group, std::uint32_t dim,
                                    bool even_then_odd, float sum_unit, std::int8_t* to,
                                    float* step_of, float* sum_of) {
  const std::uint32_t chunks = group * dim / kQueryChunk, per_head = dim / kQueryChunk;
  __m512 magnitude[16];
  for (std::uint32_t c = 0; c < 16; ++c) {
    magnitude[c] = _mm512_setzero_ps();
    if (c < chunks)
      for (std::uint32_t i = 0; i < kQueryChunk; i += 16)
        magnitude[c] =
            _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(q + c * kQueryChunk + i)), magnitude[c]);
  }
  // Lane c: chunk c's largest magnitude; live where it is a normal float (see zero_chunk).
  const __m512 top = _mm512_permutexvar_ps(_mm512_load_si512(avx512::sum_order().lane_of_slot),
                                           avx512::sum_lanes16<avx512::MaxFloats>(magnitude));
  const __mmask16 live =
      _mm512_cmp_ps_mask(top, _mm512_set1_ps(std::numeric_limits<float>::min()), _CMP_GE_OQ);
  alignas(64) float steps[16], scales[16];
  _mm512_store_ps(steps, _mm512_maskz_div_ps(live, top, _mm512_set1_ps(127.0f)));
  _mm512_store_ps(scales, _mm512_maskz_div_ps(live, _mm512_set1_ps(127.0f), top));

  // Per 128-bit lane its 8 even bytes, then its 8 odd ones; then the lanes' even halves first.
  const __m512i lane_split =
      _mm512_broadcast_i32x4(_mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
  const __m512i halves = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  for (std::uint32_t c = 0; c < chunks; ++c) {
    const float* x = q + c * kQueryChunk;
    __m512i codes = _mm512_setzero_si512();
    if ((live >> c) & 1) {
      const __m512 scale = _mm512_set1_ps(scales[c]);
      __m128i quarter[4];
      for (int i = 0; i < 4; ++i)
        quarter[i] = _mm512_cvtsepi32_epi8(
            _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * i), scale)));
      codes = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(quarter[1], quarter[0])),
                                 _mm256_set_m128i(quarter[3], quarter[2]), 1);
    }
    // Sums of 8 codes per 64-bit lane, each code read as code + 128.
    const __m512i eights = _mm512_sad_epu8(_mm512_xor_si512(codes, bias), _mm512_setzero_si512());
    for (int part = 0; part < 2; ++part) {
      const auto sum = static_cast<std::int32_t>(
          _mm512_mask_reduce_add_epi64(static_cast<__mmask8>(0x0F << (4 * part)), eights) -
          32 * 128);
      step_of[2 * c + part] = steps[c];
      sum_of[2 * c + part] = steps[c] * static_cast<float>(sum) * sum_unit;
    }
    std::int8_t* head = to + c / per_head * dim;
    const std::uint32_t chunk = c % per_head;
    if (!even_then_odd) {
      _mm512_storeu_si512(head + chunk * kQueryChunk, codes);
      continue;
    }
    const __m512i split = _mm512_permutexvar_epi64(halves, _mm512_shuffle_epi8(codes, lane_split));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(head + chunk * 32),
                        _mm512_castsi512_si256(split));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(head + dim / 2 + chunk * 32),
                        _mm512_extracti64x4_epi64(split, 1));
  }
}
// The chunk's codes stored; returns its step.
KVCACHE_AVX2 float quantize_chunk_avx2(const float* x, std::int8_t* codes) {
  const __m256 abs_bits = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 magnitude = _mm256_setzero_ps();
  for (std::uint32_t i = 0; i < kQueryChunk; i += 8)
    magnitude = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs_bits), magnitude);
  const float top = avx2::max_lane(magnitude);
  if (zero_chunk(top)) {
    std::fill_n(codes, kQueryChunk, std::int8_t{0});
    return 0.0f;
  }
  const __m256 scale = _mm256_set1_ps(127.0f / top);
  for (std::uint32_t i = 0; i < kQueryChunk; i += 16) {
    __m256i half[2];
    for (int h = 0; h < 2; ++h)
      half[h] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * h), scale));
    // Packs work per 128-bit half: words come out as 0-3, 8-11, 4-7, 12-15.
    const __m256i words = _mm256_permute4x64_epi64(_mm256_packs_epi32(half[0], half[1]), 0xD8);
    _mm_storeu_si128(
        reinterpret_cast<__m128i*>(codes + i),
        _mm_packs_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1)));
  }
  return top / 127.0f;
}
KVCACHE_KERNELS_END
}  // namespace

QuantizedQuery::QuantizedQuery(VectorIsa isa, std::uint32_t group, std::uint32_t dim,
                               bool int4_keys, std::pmr::memory_resource* memory)
    : storage_(memory) {
  const std::size_t parts = dim / 32, heads = group;
  const bool wide = isa == VectorIsa::avx2;
  // Floats first, then the codes (in the floats after them: a buffer of floats is aligned for
  // floats and for the codes, bytes or int16, whatever resource it comes from).
  const std::size_t floats = wide ? parts * 8 * (int4_keys ? 2 : 1) : heads * parts * 2;
  const std::size_t code_bytes = heads * dim * (wide ? 2 : 1);
  storage_.resize(floats + (code_bytes + sizeof(float) - 1) / sizeof(float));
  float* f = storage_.data();
  auto* after = reinterpret_cast<std::byte*>(f + floats);
  if (wide) {
    pair_steps = {f, parts * 8};
    if (int4_keys) pair_sums = {f + parts * 8, parts * 8};
    wide_codes = {reinterpret_cast<std::int16_t*>(after), heads * dim};
  } else {
    part_steps = {f, heads * parts};
    part_sums = {f + heads * parts, heads * parts};
    codes = {reinterpret_cast<std::int8_t*>(after), heads * dim};
  }
}

// Asked for only where there are integer key passes: the AVX2 family's or AVX-512 with VNNI.
QuantizedQuery BlockAttention::quantize(const float* q, std::pmr::memory_resource* memory) const {
  const std::uint32_t group = group_, dim = dim_, parts = dim / 32;
  QuantizedQuery out(isa_, group, dim, int4_group(keys_) != 0, memory);
  if (isa_ == VectorIsa::avx512) {
    // Parts are [group][dim / 32] in both; int8 keys' sums carry their offset's 128.
    quantize_avx512(q, group, dim, keys_ != RowFormat::int8,
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
      const float step = quantize_chunk_avx2(q + std::size_t{h} * dim + chunk * kQueryChunk,
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

void exp2_in_place(float* x, std::uint32_t n) {
  if (has_avx512()) {
    exp2_avx512_n(x, n);
    return;
  }
  for (std::uint32_t i = 0; i < n; ++i) x[i] = std::exp2(x[i]);
}

void scale_into(const float* x, float factor, float* out, std::uint32_t n) {
  if (has_avx512()) {
    scale_avx512_n(x, factor, out, n);
    return;
  }
  for (std::uint32_t i = 0; i < n; ++i) out[i] = x[i] * factor;
}

void block_logits(const float* q, std::uint32_t group, std::uint32_t dim, const float* k,
                  std::uint32_t n, float* logits) {
  if (has_avx512() && dim % 16 == 0) {
    logits_avx512(q, group, dim, k, n, logits);
    return;
  }
  for (std::uint32_t j = 0; j < n; ++j)
    for (std::uint32_t g = 0; g < group; ++g) {
      float dot = 0.0f;
      for (std::uint32_t i = 0; i < dim; ++i) dot += q[g * dim + i] * k[std::size_t{j} * dim + i];
      logits[std::size_t{g} * n + j] = dot;
    }
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
    // A whole page of 16 slots (the default size) is one block, made here from its tiles (int4
    // calls of 4096 tokens on one thread about 4% faster than through add).
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

void BlockAttention::portable(const float* q, const RowBlock& k, const RowBlock& v, std::uint32_t n,
                              SoftmaxState& state, float* logits) const {
  const std::uint32_t group = group_, dim = dim_;
  const auto* kf = static_cast<const float*>(k.rows);
  const auto* vf = static_cast<const float*>(v.rows);
  block_logits(q, group, dim, kf, n, logits);
  for (std::uint32_t g = 0; g < group; ++g) {
    float* lg = logits + std::size_t{g} * n;
    const float block_max = *std::max_element(lg, lg + n);
    const float m = std::max(state.m[g], block_max);
    if (m != state.m[g]) state.rescale(g, std::exp2(state.m[g] - m), dim);  // 0 at first
    for (std::uint32_t j = 0; j < n; ++j) lg[j] -= m;
    exp2_in_place(lg, n);
    for (std::uint32_t j = 0; j < n; ++j) state.l[std::size_t{g} * kLanes + j % kLanes] += lg[j];
    state.m[g] = m;
  }
  if (has_avx512() && dim % 16 == 0) {
    accumulate_avx512(logits, group, dim, vf, n, state.acc.data());
    return;
  }
  for (std::uint32_t g = 0; g < group; ++g)
    for (std::uint32_t j = 0; j < n; ++j)
      for (std::uint32_t i = 0; i < dim; ++i)
        state.acc[std::size_t{g} * dim + i] +=
            logits[std::size_t{g} * n + j] * vf[std::size_t{j} * dim + i];
}

float SoftmaxState::weight_sum(std::uint32_t g) const {
  float sum = 0.0f;
  for (std::uint32_t i = 0; i < kLanes; ++i) sum += l[std::size_t{g} * kLanes + i];
  return sum;
}

void SoftmaxState::rescale(std::uint32_t g, float factor, std::uint32_t dim) {
  for (std::uint32_t i = 0; i < kLanes; ++i) l[std::size_t{g} * kLanes + i] *= factor;
  for (std::uint32_t i = 0; i < dim; ++i) acc[std::size_t{g} * dim + i] *= factor;
}

void SoftmaxState::merge(const SoftmaxState& other, std::uint32_t dim, std::uint32_t first_head) {
  // In vectors where there are (a long decode split across threads merges some thirty states:
  // scalar, that took 2-4% of an int4 call of 4096 tokens).
  const auto mix = [](float* x, float mine, const float* from, float theirs, std::uint32_t n) {
    if (has_avx512()) {
      mix_avx512_n(x, mine, from, theirs, n);
      return;
    }
    for (std::uint32_t i = 0; i < n; ++i) x[i] = x[i] * mine + from[i] * theirs;
  };
  // A head's m is -inf until it has seen keys, and finite after (the key that set it has weight
  // 1), so m tells which heads have weights: no sums of l needed (16 dependent additions each).
  for (std::uint32_t g = 0; g < m.size(); ++g) {
    const std::uint32_t o = first_head + g;
    if (other.m[o] == -std::numeric_limits<float>::infinity()) continue;
    const float top = std::max(m[g], other.m[o]);
    const float mine = std::exp2(m[g] - top), theirs = std::exp2(other.m[o] - top);
    mix(l.data() + std::size_t{g} * kLanes, mine, other.l.data() + std::size_t{o} * kLanes, theirs,
        kLanes);
    mix(acc.data() + std::size_t{g} * dim, mine, other.acc.data() + std::size_t{o} * dim, theirs,
        dim);
    m[g] = top;
  }
}

}  // namespace kvcache::cpu
