// The query in integers, for integer dot products with int8 or int4 keys; the quantizers of each
// vector family are in avx512/ and avx2/ (query_quantizer.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory_resource>
#include <span>
#include <vector>

#include "kernels/cpu_features.hpp"

namespace kvcache::cpu {

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

// A chunk (kQueryChunk elements) of q quantized, alike in both families: step = max|x| / 127 and
// codes[i] = rne(x[i] x 127 / max|x|), all 0 where max|x| is under the smallest normal float
// (127 / max|x| would overflow). A multiplication rather than a division per element: short
// decodes are bound by such per-call work. zero_chunk: whether a chunk of this max|x| (or NaN) is
// all zeros.
inline bool zero_chunk(float top) {
  return !(top >= std::numeric_limits<float>::min());
}

namespace avx512 {
// q ([group][dim]) for the AVX-512 integer key passes (see QuantizedQuery): per head its codes, in
// element order (int8 keys) or its even elements then its odd ones (int4), and per part of 32
// elements the step and step x the code sum x sum_unit.
void quantize_query(const float* q, std::uint32_t group, std::uint32_t dim, bool even_then_odd,
                    float sum_unit, std::int8_t* to, float* step_of, float* sum_of);
}  // namespace avx512
namespace avx2 {
// One chunk of kQueryChunk elements: its codes stored; returns its step.
float quantize_chunk(const float* x, std::int8_t* codes);
}  // namespace avx2

}  // namespace kvcache::cpu
