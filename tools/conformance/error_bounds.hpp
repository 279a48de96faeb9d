// How far a backend's attention may be from the reference, from what it declares alone: a
// format's own loss against float32, and the bounds of the roundings its capabilities' numerics
// name (queries rounded for integer keys, weights rounded for quantized values). Nothing here
// knows a backend's kernels.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attention_matrix.hpp"
#include "setup.hpp"

namespace kvcache::conformance {

// Error allowed against attention over the original float32 K/V (the format's own loss). A
// format from outside is held to its own decode only (the exact checks), not to a loss we cannot
// know.
inline double format_tolerance(const FormatCase& format) {
  if (!is_built_in_format(format.name)) return std::numeric_limits<double>::infinity();
  if (format.name == "fp32" || format.name == "fp16") return 2e-3;
  if (format.name == "bf16") return 1e-2;
  // A row's step is its largest |element| / 127, larger the longer the row: at head_dim 128 one
  // case in 672 loses 0.031.
  if (format.name == "int8-per-token") return 4e-2;
  if (format.name == "fp8-e4m3") return 0.15;
  // 4-bit and 2-bit codes. int4's step is its group's range / 15, and wider groups of normal
  // elements span wider ranges: groups of 64 and 128 lose up to 0.37 here.
  if (format.name == "int4-group" && format.options.value("group", 32) > 32) return 0.45;
  return 0.35;
}

// What a backend declares of its arithmetic (its capabilities' numerics, docs/plugin-abi.md):
// whether it rounds q for a format's keys (to `levels` steps a side per `block` elements, not
// when scores are accumulated if so declared) and the weights of a format's values (to `levels`
// steps of the largest weight, each off by at most `error` of a step, at these head dims). The
// bounds below follow from these figures alone; nothing here knows a backend's kernels.
inline const nlohmann::json& numerics_of(const std::string& backend) {
  static const nlohmann::json none = nlohmann::json::object();
  const ComponentInfo* info = registry().find(ComponentKind::backend, backend);
  return info != nullptr ? info->capabilities.numerics : none;
}
inline bool lists(const nlohmann::json& rule, const char* key, const nlohmann::json& value) {
  const nlohmann::json& list = rule.value(key, nlohmann::json::array());
  return std::find(list.begin(), list.end(), value) != list.end();
}
struct QueryRounding {
  std::size_t block = 64;
  double levels = 127.0;  // steps on each side of 0
};
inline std::optional<QueryRounding> rounds_query(const std::string& backend,
                                                 const std::string& format, bool scores) {
  const nlohmann::json& n = numerics_of(backend);
  if (!n.contains("query_rounding")) return std::nullopt;
  const nlohmann::json& rule = n["query_rounding"];
  if (!lists(rule, "formats", format) || (scores && rule.value("except_with_scores", false)))
    return std::nullopt;
  return QueryRounding{rule.value("block", std::size_t{64}),
                       std::ldexp(1.0, rule.value("bits", 8) - 1) - 1.0};
}
struct WeightRounding {
  double levels = 255.0;  // steps from 0 to the largest weight
  double error = 0.52;    // the most a weight is off, in steps
};
inline std::optional<WeightRounding> rounds_weights(const std::string& backend,
                                                    const std::string& format, std::uint32_t dim) {
  const nlohmann::json& n = numerics_of(backend);
  if (!n.contains("value_weight_rounding")) return std::nullopt;
  const nlohmann::json& rule = n["value_weight_rounding"];
  if (!lists(rule, "formats", format) || !lists(rule, "head_dims", dim)) return std::nullopt;
  return WeightRounding{rule.value("levels", 255.0), rule.value("error", 0.52)};
}

// The most rounded weights can move an output element of a query head: each of the n visible
// rows' weights is off by at most `error` of 1/levels of the largest weight times the largest
// step, against a code at most 8 from the middle of its range, so by n x 8 x error / levels x the
// largest softmax weight x the largest step among the visible rows' groups of the head's KV head.
// A stored group spans 15 steps (its elements' codes run from 0 to 15). keys, values:
// [rows][kv_heads][dim].
inline double weight_rounding_bound(const WeightRounding& rounding, std::span<const float> q_head,
                                    std::span<const float> keys, std::span<const float> values,
                                    std::uint32_t kv_heads, std::uint32_t kv_head,
                                    std::uint32_t group, std::span<const std::size_t> visible,
                                    double scale) {
  const std::size_t dim = q_head.size();
  std::vector<double> logits;
  double top_step = 0.0;
  for (const std::size_t t : visible) {
    const float* k = keys.data() + (t * kv_heads + kv_head) * dim;
    const float* v = values.data() + (t * kv_heads + kv_head) * dim;
    double dot = 0.0;
    for (std::size_t i = 0; i < dim; ++i) dot += double{q_head[i]} * k[i];
    logits.push_back(scale * dot);
    for (std::size_t g = 0; g < dim; g += group) {
      const auto [low, high] = std::minmax_element(v + g, v + g + group);
      top_step = std::max(top_step, double{*high - *low} / 15.0);
    }
  }
  if (logits.empty()) return 0.0;
  const double top = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (const double l : logits) sum += std::exp(l - top);
  return static_cast<double>(visible.size()) * 8.0 * rounding.error / rounding.levels / sum *
         top_step;
}

// The slots whose positions one of the ranges holds.
inline std::vector<std::size_t> visible_slots(std::span<const Position> positions,
                                              std::span<const PositionRange> ranges) {
  std::vector<std::size_t> slots;
  for (std::size_t t = 0; t < positions.size(); ++t)
    for (const PositionRange& r : ranges)
      if (positions[t] >= r.begin && positions[t] < r.end) {
        slots.push_back(t);
        break;
      }
  return slots;
}

// q as such a kernel uses it: per block of a head's elements, rounded to steps of
// max|q_block| / levels, as rne(q x levels / max|q_block|), 0 where max|q_block| is subnormal
// (the kernel rounds the scaled q, the same up to float rounding).
inline std::vector<float> round_query(const QueryRounding& rounding, std::span<const float> q) {
  std::vector<float> out(q.begin(), q.end());
  const auto levels = static_cast<float>(rounding.levels);
  for (std::size_t c = 0; c < out.size(); c += rounding.block) {
    float top = 0.0f;
    for (std::size_t i = c; i < c + rounding.block; ++i) top = std::max(top, std::fabs(out[i]));
    for (std::size_t i = c; i < c + rounding.block; ++i)
      out[i] = top < std::numeric_limits<float>::min()
                   ? 0.0f
                   : top / levels * std::nearbyint(out[i] * (levels / top));
  }
  return out;
}

// The most round_query can move a query head's logits (natural units): each element is off by
// at most half its chunk's step, so q.k by at most sum over chunks of step / 2 x sum |k_i|; the
// worst key of the sequence bounds every visible one. keys: [n][kv_heads][dim].
inline double query_rounding_bound(const QueryRounding& rounding, std::span<const float> q_head,
                                   std::span<const float> keys, std::uint32_t kv_heads,
                                   std::uint32_t kv_head, double scale) {
  const std::size_t dim = q_head.size(), n = keys.size() / (kv_heads * dim);
  double worst = 0.0;
  for (std::size_t t = 0; t < n; ++t) {
    double error = 0.0;
    for (std::size_t c = 0; c < dim; c += rounding.block) {
      double top = 0.0, sum_k = 0.0;
      for (std::size_t i = c; i < c + rounding.block; ++i) {
        top = std::max(top, double{std::fabs(q_head[i])});
        sum_k += std::fabs(keys[(t * kv_heads + kv_head) * dim + i]);
      }
      error += top / rounding.levels / 2.0 * sum_k;
    }
    worst = std::max(worst, error);
  }
  return scale * worst;
}

}  // namespace kvcache::conformance
