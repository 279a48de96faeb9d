// The online softmax's running state (FlashInfer's state.cuh): per query head a reference point
// for the logits, the sum of the weights and the weighted sum of values, which blocks of keys
// update and which states over other keys of the same queries merge into.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory_resource>
#include <span>
#include <vector>

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

}  // namespace kvcache::cpu
