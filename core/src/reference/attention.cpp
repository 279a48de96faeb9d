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

void attention_at_cache_positions(const AttentionShape& shape, const Rope& rope,
                                  std::span<const float> q, Position q_position,
                                  std::span<const float> keys, std::span<const float> values,
                                  std::span<const Position> positions,
                                  std::span<const PositionRange> visible, float scale,
                                  std::span<float> out) {
  const std::size_t d = shape.head_dim, row = shape.kv_heads * d;
  if (q.size() != shape.q_heads * d || keys.size() != positions.size() * row ||
      values.size() != keys.size())
    throw Error(Code::invalid_argument, "reference attention: inconsistent shapes");
  const std::vector<double> frequencies = rope_frequencies(rope, shape.head_dim);
  std::vector<float> k, v;
  std::vector<Position> ranks;
  Position query_rank = 0;
  for (std::size_t t = 0; t < positions.size(); ++t) {
    const Position p = positions[t];
    if (std::none_of(visible.begin(), visible.end(),
                     [&](const PositionRange& r) { return p >= r.begin && p < r.end; }))
      continue;
    const auto rank = static_cast<Position>(ranks.size());
    if (p < q_position) query_rank = rank + 1;
    ranks.push_back(rank);
    k.insert(k.end(), keys.begin() + t * row, keys.begin() + (t + 1) * row);
    v.insert(v.end(), values.begin() + t * row, values.begin() + (t + 1) * row);
    for (std::size_t h = 0; h < shape.kv_heads; ++h)
      rope_rotate(rope, frequencies, static_cast<double>(rank - p),
                  std::span<float>(k).subspan((rank * shape.kv_heads + h) * d, d));
  }
  std::vector<float> turned(q.begin(), q.end());
  for (std::size_t h = 0; h < shape.q_heads; ++h)
    rope_rotate(rope, frequencies, static_cast<double>(query_rank - q_position),
                std::span<float>(turned).subspan(h * d, d));
  const PositionRange all{0, static_cast<Position>(ranks.size())};
  attention(shape, turned, k, v, ranks, std::span<const PositionRange>(&all, 1), scale, out);
}

}  // namespace kvcache::reference
