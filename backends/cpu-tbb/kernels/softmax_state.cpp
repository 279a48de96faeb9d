#include "kernels/softmax_state.hpp"

#include <cmath>

#include "kernels/portable/portable_path.hpp"

namespace kvcache::cpu {

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
  // A head's m is -inf until it has seen keys, and finite after (the key that set it has weight
  // 1), so m tells which heads have weights: no sums of l needed (16 dependent additions each).
  for (std::uint32_t g = 0; g < m.size(); ++g) {
    const std::uint32_t o = first_head + g;
    if (other.m[o] == -std::numeric_limits<float>::infinity()) continue;
    const float top = std::max(m[g], other.m[o]);
    const float mine = std::exp2(m[g] - top), theirs = std::exp2(other.m[o] - top);
    // mix_into is vectorized where the CPU allows: a long decode split across threads merges
    // some thirty states, and scalar merging showed in an int4 call's time (docs/perf-log.md).
    mix_into(l.data() + std::size_t{g} * kLanes, mine, other.l.data() + std::size_t{o} * kLanes,
             theirs, kLanes);
    mix_into(acc.data() + std::size_t{g} * dim, mine, other.acc.data() + std::size_t{o} * dim,
             theirs, dim);
    m[g] = top;
  }
}

}  // namespace kvcache::cpu
