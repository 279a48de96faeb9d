// Synthetic K, V and q rows for the serving simulation: each row a window of a fixed pool of
// standard normal samples, at a random offset. One draw per row instead of one per element:
// drawing every element took a fifth of the main job's time, which then measured the random
// number generator more than the cache.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace kvcache::tool {

class SyntheticRows {
 public:
  explicit SyntheticRows(std::uint64_t seed) : rng_(seed), pool_(kPool) {
    std::normal_distribution<float> normal;
    for (float& x : pool_) x = normal(rng_);
  }

  // Fills `out`, a whole number of rows of `row` floats (row <= kPool), row by row.
  void fill(std::span<float> out, std::size_t row) {
    std::uniform_int_distribution<std::size_t> offset(0, kPool - row);
    for (std::size_t at = 0; at < out.size(); at += row) {
      const float* from = pool_.data() + offset(rng_);
      std::copy(from, from + row, out.begin() + static_cast<std::ptrdiff_t>(at));
    }
  }

 private:
  static constexpr std::size_t kPool = std::size_t{1} << 16;
  std::mt19937_64 rng_;
  std::vector<float> pool_;
};

}  // namespace kvcache::tool
