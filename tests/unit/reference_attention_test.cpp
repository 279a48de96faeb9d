// The reference attention against a dense formulation with an explicit boolean mask, like the
// seed's SlidingWindowAttention (but causal for the first positions: we never let a query see a
// later sink token).
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kvcache/reference_attention.hpp"

namespace kvcache {
namespace {

// Dense: scores for every key, -inf where the mask says no, softmax, weighted sum.
std::vector<float> dense(const reference::AttentionShape& s, const std::vector<float>& q,
                         const std::vector<float>& k, const std::vector<float>& v,
                         const std::vector<bool>& allowed, float scale) {
  const std::size_t n = allowed.size(), d = s.head_dim, group = s.q_heads / s.kv_heads;
  std::vector<float> out(s.q_heads * d, 0.0f);
  for (std::size_t h = 0; h < s.q_heads; ++h) {
    std::vector<double> p(n, -INFINITY);
    double top = -INFINITY;
    for (std::size_t t = 0; t < n; ++t) {
      if (!allowed[t]) continue;
      double dot = 0;
      for (std::size_t i = 0; i < d; ++i)
        dot += double(q[h * d + i]) * k[(t * s.kv_heads + h / group) * d + i];
      p[t] = dot * scale;
      top = std::max(top, p[t]);
    }
    double sum = 0;
    for (double& x : p) sum += (x = std::exp(x - top));
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t i = 0; i < d; ++i)
        out[h * d + i] += float(p[t] / sum * v[(t * s.kv_heads + h / group) * d + i]);
  }
  return out;
}

TEST(ReferenceAttention, MatchesDenseMaskOnSinkWindowAndGqa) {
  const reference::AttentionShape shape{8, 2, 16};
  const std::size_t n = 40, sinks = 4, window = 8;
  std::mt19937 rng(9);
  std::normal_distribution<float> normal;
  std::vector<float> q(shape.q_heads * 16), k(n * 2 * 16), v(k.size());
  for (float& x : q) x = normal(rng);
  for (float& x : k) x = normal(rng);
  for (float& x : v) x = normal(rng);
  std::vector<Position> positions(n);
  for (std::size_t t = 0; t < n; ++t) positions[t] = static_cast<Position>(t);
  for (const Position query : {Position{2}, Position{20}, Position{39}}) {
    std::vector<bool> allowed(n, false);  // the seed's rule, kept causal
    for (Position t = 0; t <= query; ++t)
      allowed[t] = t < Position(sinks) || query - t < Position(window);
    std::vector<PositionRange> ranges;
    if (query - Position(window) + 1 > Position(sinks))
      ranges = {{0, Position(sinks)}, {query - Position(window) + 1, query + 1}};
    else
      ranges = {{0, query + 1}};
    std::vector<float> out(q.size());
    std::vector<float> weights(n, 0.0f);
    reference::attention(shape, q, k, v, positions, ranges, 0.25f, out, weights);
    const std::vector<float> want = dense(shape, q, k, v, allowed, 0.25f);
    for (std::size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-5) << i;
    double total = 0;
    for (std::size_t t = 0; t < n; ++t) {
      total += weights[t];
      if (!allowed[t]) {
        EXPECT_EQ(weights[t], 0.0f);
      }
    }
    EXPECT_NEAR(total, shape.q_heads, 1e-4);  // each head's weights sum to one
  }
}

TEST(ReferenceAttention, NothingVisibleGivesZeros) {
  const reference::AttentionShape shape{1, 1, 4};
  std::vector<float> q(4, 1.0f), k(8, 1.0f), v(8, 1.0f), out(4, 7.0f);
  const std::vector<Position> positions{0, 1};
  reference::attention(shape, q, k, v, positions, std::vector<PositionRange>{{5, 9}}, 1.0f, out);
  EXPECT_EQ(out, std::vector<float>(4, 0.0f));
}

}  // namespace
}  // namespace kvcache
