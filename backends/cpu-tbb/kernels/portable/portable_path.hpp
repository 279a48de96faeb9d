// Float arithmetic over rows decoded to float32, vectorized where the CPU allows (AVX-512), else
// scalar: what BlockAttention's portable path and the driver's scaling, merging and score pass
// use. The passes of block16.hpp are the fast path.
#pragma once

#include <cstdint>

namespace kvcache::cpu {

// Base-2 logits of a block: logits[g * n + j] = q_g . k_j, with q already scaled by
// scale * log2(e). q: [group][dim], k: [n][dim].
void block_logits(const float* q, std::uint32_t group, std::uint32_t dim, const float* k,
                  std::uint32_t n, float* logits);
// acc[g] += sum over j of weights[g * n + j] x v[j], for `group` heads; v: [n][dim].
void block_accumulate(const float* weights, std::uint32_t group, std::uint32_t dim, const float* v,
                      std::uint32_t n, float* acc);
// 2^x for n floats in place (vectorized where the CPU allows).
void exp2_in_place(float* x, std::uint32_t n);
// out[i] = x[i] x factor for n floats (vectorized where the CPU allows: a call scales its queries
// and its outputs so, which the generic code did four floats at a time).
void scale_into(const float* x, float factor, float* out, std::uint32_t n);
// x = x * mine + other * theirs for n floats (other does not overlap x).
void mix_into(float* x, float mine, const float* other, float theirs, std::uint32_t n);

}  // namespace kvcache::cpu
