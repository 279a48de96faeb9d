#include "kvcache/reference_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kvcache/status.hpp"

namespace kvcache::reference {

void attention(const AttentionShape& shape, std::span<const float> q, std::span<const float> keys,
               std::span<const float> values, std::span<const Position> positions,
               std::span<const PositionRange> visible, float scale, std::span<float> out,
               std::span<float> weights) {
  const std::size_t d = shape.head_dim;
  const std::size_t n = positions.size();
  if (shape.kv_heads == 0 || shape.q_heads % shape.kv_heads != 0 || q.size() != shape.q_heads * d ||
      keys.size() != n * shape.kv_heads * d || values.size() != keys.size() ||
      out.size() != q.size() || (!weights.empty() && weights.size() != n))
    throw Error(Code::invalid_argument, "reference attention: inconsistent shapes");
  const auto seen = [&](Position p) {
    return std::any_of(visible.begin(), visible.end(),
                       [&](const PositionRange& r) { return p >= r.begin && p < r.end; });
  };
  const std::size_t group = shape.q_heads / shape.kv_heads;
  std::vector<double> logits(n);
  for (std::size_t h = 0; h < shape.q_heads; ++h) {
    const std::size_t kv = h / group;
    double top = -std::numeric_limits<double>::infinity();
    for (std::size_t t = 0; t < n; ++t) {
      if (!seen(positions[t])) continue;
      double dot = 0.0;
      for (std::size_t i = 0; i < d; ++i)
        dot += static_cast<double>(q[h * d + i]) * keys[(t * shape.kv_heads + kv) * d + i];
      logits[t] = dot * scale;
      top = std::max(top, logits[t]);
    }
    double sum = 0.0;
    std::vector<double> acc(d, 0.0);
    for (std::size_t t = 0; t < n; ++t) {
      if (!seen(positions[t])) continue;
      const double w = std::exp(logits[t] - top);
      sum += w;
      for (std::size_t i = 0; i < d; ++i) acc[i] += w * values[(t * shape.kv_heads + kv) * d + i];
    }
    for (std::size_t i = 0; i < d; ++i)
      out[h * d + i] = sum > 0.0 ? static_cast<float>(acc[i] / sum) : 0.0f;
    if (!weights.empty() && sum > 0.0) {
      for (std::size_t t = 0; t < n; ++t)
        if (seen(positions[t])) weights[t] += static_cast<float>(std::exp(logits[t] - top) / sum);
    }
  }
}

}  // namespace kvcache::reference
