// The arithmetic of attention on the CPU: base-2 online softmax over blocks of keys, for the
// query heads of one KV head together (each K and V row is read once per group).
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace kvcache::cpu {

// Running state for `group` query heads: max logit m, sum of weights l, weighted sum of values.
struct SoftmaxState {
  SoftmaxState(std::uint32_t group, std::uint32_t dim)
      : m(group, -std::numeric_limits<float>::infinity()),
        l(group, 0.0f),
        acc(std::size_t{group} * dim, 0.0f) {}
  std::vector<float> m;
  std::vector<float> l;
  std::vector<float> acc;  // [group][dim]
  // Folds in a state computed over other keys of the same queries.
  void merge(const SoftmaxState& other, std::uint32_t dim);
};

// Base-2 logits of a block: logits[g * n + j] = q_g . k_j, with q already scaled by
// scale * log2(e). q: [group][dim], k: [n][dim].
void block_logits(const float* q, std::uint32_t group, std::uint32_t dim, const float* k,
                  std::uint32_t n, float* logits);

// How value rows reach attend_block: float32 rows, or the stored fp16 rows read in place.
enum class Values { float32, float16 };
// Whether attend_block can read fp16 values in place for this shape.
bool takes_fp16_values(std::uint32_t group, std::uint32_t dim);

// Adds n keys ([n][dim] float32) and values ([n][dim], as `values` says) to the state. `logits`
// has room for group * n floats; k has room for n rounded up to 16 rows (rows past n are
// overwritten).
void attend_block(const float* q, std::uint32_t group, std::uint32_t dim, float* k, const void* v,
                  Values values, std::uint32_t n, SoftmaxState& state, float* logits);

// 2^x for n floats in place (vectorized where the CPU allows).
void exp2_in_place(float* x, std::uint32_t n);

}  // namespace kvcache::cpu
