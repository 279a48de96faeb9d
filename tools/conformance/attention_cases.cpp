// Every backend's attention against the reference, through the real loader: every format (int4
// in groups of 32, 64 and 128) x MHA/GQA/MQA x masks (causal, sliding window, sinks + window) x
// page sizes 8..64, ragged lengths, decode and prefill, compacted sequences, long sequences split
// across threads, and accumulated scores. Unused slots hold NaN, so a read of padding would show.
// Kernels that round q to int8 (integer dot products) are checked against the rounded q and held to
// a derived bound against q itself.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "fixture.hpp"
#include "kvcache/formats.hpp"
#include "kvcache/numeric.hpp"
#include "kvcache/query_rotation.hpp"
#include "kvcache/reference_attention.hpp"

namespace kvcache::conformance {
namespace {

struct Heads {
  std::uint32_t q, kv;
};

// A storage format with its options: every format with its defaults (kivi-k in groups of 8
// tokens, to fit small pages), and int4-group also in groups of 64 and (where head_dim allows)
// 128 elements, which have kernels of their own.
struct FormatCase {
  std::string name;
  nlohmann::json options = nlohmann::json::object();
};
std::vector<FormatCase> format_cases(std::uint32_t head_dim) {
  std::vector<FormatCase> formats;
  for (const std::string& f : format_names()) {
    formats.push_back({f, f == "kivi-k" ? nlohmann::json{{"group", 8}} : nlohmann::json::object()});
    if (f == "int4-group")
      for (const std::uint32_t group : {64u, 128u})
        if (head_dim % group == 0) formats.push_back({f, {{"group", group}}});
  }
  for (const std::string& f : extra_formats()) formats.push_back({f});
  return formats;
}

struct AttentionCase {
  std::string backend;
  FormatCase format;
  Heads heads;
  std::uint32_t page_size;
  std::uint32_t head_dim;
};

void PrintTo(const AttentionCase& c, std::ostream* os) {
  *os << c.backend << " " << c.format.name << c.format.options.dump() << " q" << c.heads.q << "/kv"
      << c.heads.kv << " page " << c.page_size << " dim " << c.head_dim;
}

std::vector<AttentionCase> attention_cases() {
  std::vector<AttentionCase> cases;
  for (const std::string& backend : backend_names())
    for (const FormatCase& f : format_cases(64))
      for (const Heads h : {Heads{8, 8}, Heads{8, 2}, Heads{8, 1}})
        for (const std::uint32_t p : {8u, 16u, 32u, 64u}) cases.push_back({backend, f, h, p, 64});
  // Head dimension 128 (Llama's) has kernels of its own: every group size at one page size.
  for (const std::string& backend : backend_names())
    for (const FormatCase& f : format_cases(128))
      for (const Heads h : {Heads{8, 8}, Heads{8, 4}, Heads{8, 2}, Heads{8, 1}})
        cases.push_back({backend, f, h, 16, 128});
  // The group sizes of real models that the passes (groups of 1, 2, 4, 8) do not have: SmolLM2's
  // 3, Qwen2.5's 7, and 5, 6, 12 and 16, padded or split into parts (head_groups.hpp). In the
  // formats whose kernels differ, on cpu-tbb; the other backends in fp16.
  const std::vector<std::pair<Heads, std::uint32_t>> groups = {
      {{9, 3}, 64}, {{14, 2}, 64}, {{15, 3}, 128}, {{12, 2}, 128}, {{24, 2}, 128}, {{16, 1}, 128}};
  for (const std::string& backend : backend_names())
    for (const auto& [h, dim] : groups)
      for (const FormatCase& f : format_cases(dim))
        if (f.options.empty() &&
            (f.name == "fp16" ||
             (backend == "cpu-tbb" && (f.name == "int8-per-token" || f.name == "int4-group"))))
          cases.push_back({backend, f, h, 16, dim});
  std::erase_if(cases,
                [](const AttentionCase& c) { return !wanted(c.format.name, c.format.name); });
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<AttentionCase>& info) {
  const FormatCase& f = info.param.format;
  return test_name(info.param.backend + "_" + f.name +
                   (f.name == "int4-group" && f.options.contains("group")
                        ? "_g" + std::to_string(f.options["group"].get<std::uint32_t>())
                        : "") +
                   "_q" + std::to_string(info.param.heads.q) + "kv" +
                   std::to_string(info.param.heads.kv) + "_p" +
                   std::to_string(info.param.page_size) +
                   (info.param.head_dim == 64 ? "" : "_d" + std::to_string(info.param.head_dim)));
}

// Error allowed against attention over the original float32 K/V (the format's own loss). A
// format from outside is held to its own decode only (the exact checks), not to a loss we cannot
// know.
double format_tolerance(const FormatCase& format) {
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
const nlohmann::json& numerics_of(const std::string& backend) {
  static const nlohmann::json none = nlohmann::json::object();
  const ComponentInfo* info = registry().find(ComponentKind::backend, backend);
  return info != nullptr ? info->capabilities.numerics : none;
}
bool lists(const nlohmann::json& rule, const char* key, const nlohmann::json& value) {
  const nlohmann::json& list = rule.value(key, nlohmann::json::array());
  return std::find(list.begin(), list.end(), value) != list.end();
}
struct QueryRounding {
  std::size_t block = 64;
  double levels = 127.0;  // steps on each side of 0
};
std::optional<QueryRounding> rounds_query(const std::string& backend, const std::string& format,
                                          bool scores) {
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
std::optional<WeightRounding> rounds_weights(const std::string& backend, const std::string& format,
                                             std::uint32_t dim) {
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
double weight_rounding_bound(const WeightRounding& rounding, std::span<const float> q_head,
                             std::span<const float> keys, std::span<const float> values,
                             std::uint32_t kv_heads, std::uint32_t kv_head, std::uint32_t group,
                             std::span<const std::size_t> visible, double scale) {
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
std::vector<std::size_t> visible_slots(std::span<const Position> positions,
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
std::vector<float> round_query(const QueryRounding& rounding, std::span<const float> q) {
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
double query_rounding_bound(const QueryRounding& rounding, std::span<const float> q_head,
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

// A decode (or, with query counts set after, prefill) request over `ids` with these tensors and
// visible ranges.
AttentionRequest request_for(std::span<const SeqId> ids, const DLTensor& q, DLTensor& out,
                             VisibleRanges visible) {
  AttentionRequest request;
  request.sequences = ids;
  request.q = &q;
  request.out = &out;
  request.visible = visible;
  return request;
}

// Two layers of the case's shape and format, 64 MiB, padding poisoned.
StoreSpec store_spec_of(const AttentionCase& c) {
  StoreSpec spec;
  spec.model = {2, c.heads.q, c.heads.kv, c.head_dim};
  spec.page_size = c.page_size;
  spec.k_format = spec.v_format = c.format.name;
  spec.k_options = spec.v_options = c.format.options;
  spec.capacity_bytes = 64ull << 20;
  spec.poison_unused = true;
  return spec;
}

class AttentionConformance : public ::testing::TestWithParam<AttentionCase> {
 protected:
  const std::uint32_t dim_ = GetParam().head_dim;
  static constexpr std::uint32_t kLayers = 2;

  void SetUp() override {
    record_case(GetParam().backend, GetParam().format.name);
    const StoreSpec spec = store_spec_of(GetParam());
    store_ = open_store(GetParam().backend, spec);
    if (!store_) GTEST_SKIP() << skip_reason(GetParam().backend, spec);
    attention_ = registry().create_backend(GetParam().backend)->create_attention();
  }

  std::uint32_t row_floats() const { return GetParam().heads.kv * dim_; }

  // Appends n random tokens to each sequence for every layer; remembers the float32 K/V. With
  // `growth`, the keys of even KV heads grow along the tokens appended (the t-th times 1 + growth
  // x t), so that their queries' largest logits rise block after block, each head's at its own.
  void append(const std::vector<SeqId>& ids, std::uint32_t n, float growth = 0.0f) {
    store_->reserve(ids, std::vector<std::uint32_t>(ids.size(), n));
    for (std::uint32_t layer = 0; layer < kLayers; ++layer) {
      std::vector<float> k(ids.size() * n * row_floats()), v(k.size());
      for (float& x : k) x = normal_(rng_);
      for (float& x : v) x = normal_(rng_);
      for (std::size_t row = 0; row < ids.size() * n; ++row)
        for (std::uint32_t h = 0; h < GetParam().heads.kv; h += 2)
          for (std::uint32_t d = 0; d < dim_; ++d)
            k[(row * GetParam().heads.kv + h) * dim_ + d] *= 1.0f + growth * (row % n);
      std::int64_t shape[3] = {static_cast<std::int64_t>(ids.size() * n), GetParam().heads.kv,
                               dim_};
      store_->append(layer, ids, std::vector<std::uint32_t>(ids.size(), n),
                     host_tensor(k.data(), shape), host_tensor(v.data(), shape));
      for (std::size_t i = 0; i < ids.size(); ++i) {
        auto& mk = original_k_[{ids[i], layer}];
        auto& mv = original_v_[{ids[i], layer}];
        mk.insert(mk.end(), k.begin() + i * n * row_floats(),
                  k.begin() + (i + 1) * n * row_floats());
        mv.insert(mv.end(), v.begin() + i * n * row_floats(),
                  v.begin() + (i + 1) * n * row_floats());
      }
    }
  }

  // What the mask says for a query at `pos`.
  static std::vector<PositionRange> ranges_for(const AttentionMask& mask, Position pos) {
    std::vector<PositionRange> r(mask.describe().max_ranges);
    std::vector<std::uint32_t> count(1);
    mask.visible(std::vector<Position>{pos}, r, count);
    r.resize(count[0]);
    return r;
  }

  // Checks queries of sequences against the reference over the stored (decoded) K/V, and over
  // the original float32 K/V within the format's tolerance.
  void check(const std::string& mask_name, const nlohmann::json& mask_options, std::uint32_t layer,
             const std::vector<SeqId>& ids, const std::vector<std::uint32_t>& query_counts,
             bool scores) {
    const auto mask = registry().create_mask(mask_name, mask_options);
    const std::uint32_t qh = GetParam().heads.q, kvh = GetParam().heads.kv;
    const bool prefill = !query_counts.empty();
    std::vector<std::uint32_t> per_seq =
        prefill ? query_counts : std::vector<std::uint32_t>(ids.size(), 1);
    std::uint64_t queries = 0;
    for (std::uint32_t c : per_seq) queries += c;
    std::vector<float> q(queries * qh * dim_), out(q.size(), NAN);
    for (float& x : q) x = normal_(rng_);
    const std::uint32_t max_ranges = mask->describe().max_ranges;
    std::vector<PositionRange> ranges(queries * max_ranges);
    std::vector<std::uint32_t> counts(queries);
    std::vector<std::vector<Position>> positions;
    std::uint64_t qi = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      positions.push_back(store_->positions(ids[i]));
      for (std::uint32_t j = 0; j < per_seq[i]; ++j, ++qi) {
        const Position pos = positions[i][positions[i].size() - per_seq[i] + j];
        const auto r = ranges_for(*mask, pos);
        counts[qi] = static_cast<std::uint32_t>(r.size());
        std::copy(r.begin(), r.end(), ranges.begin() + qi * max_ranges);
      }
    }
    std::vector<std::vector<float>> scores_before;
    for (SeqId id : ids) scores_before.push_back(store_->scores(id));
    std::int64_t shape[3] = {static_cast<std::int64_t>(queries), qh, dim_};
    DLTensor qt = host_tensor(q.data(), shape), ot = host_tensor(out.data(), shape);
    AttentionRequest request = request_for(ids, qt, ot, {ranges, counts, max_ranges, {}});
    request.layer = layer;
    request.query_counts =
        prefill ? std::span<const std::uint32_t>(query_counts) : std::span<const std::uint32_t>();
    request.accumulate_scores = scores;
    prefill ? attention_->prefill(*store_, request) : attention_->decode(*store_, request);

    const reference::AttentionShape rs{qh, kvh, dim_};
    const float scale = 1.0f / std::sqrt(static_cast<float>(dim_));
    qi = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const std::size_t n = positions[i].size();
      std::vector<float> k(n * row_floats()), v(k.size());
      std::int64_t kv_shape[3] = {static_cast<std::int64_t>(n), kvh, dim_};
      DLTensor kt = host_tensor(k.data(), kv_shape), vt = host_tensor(v.data(), kv_shape);
      store_->gather(layer, ids[i], kt, vt);
      std::vector<float> weights(n, 0.0f);
      for (std::uint32_t j = 0; j < per_seq[i]; ++j, ++qi) {
        const std::span<const PositionRange> r(ranges.data() + qi * max_ranges, counts[qi]);
        const std::span<const float> qrow(q.data() + qi * qh * dim_, qh * dim_);
        std::vector<float> want(qh * dim_), loose(qh * dim_);
        reference::attention(rs, qrow, k, v, positions[i], r, scale, want, weights);
        // A kernel that rounds q is held to 1e-3 against the reference for the rounded q, and to
        // a bound derived from the rounding against the reference for q itself: logits move by
        // at most e per head, so each weight p_t by a factor within exp(+-2e) and an output
        // element by at most (exp(2e) - 1) x sum_t p_t |v_t| (the reference over |v|). A kernel
        // that rounds the weights may err by weight_rounding_bound more (times exp(2e), the most
        // rounding q raises the largest weight by), against either.
        std::vector<float> exact = want, slack(qh * dim_, 0.0f), weight_slack(qh * dim_, 0.0f);
        const auto rounded_q = rounds_query(GetParam().backend, GetParam().format.name, scores);
        std::vector<float> mean_abs_v(qh * dim_);
        if (rounded_q) {
          reference::attention(rs, round_query(*rounded_q, qrow), k, v, positions[i], r, scale,
                               exact);
          std::vector<float> abs_v(v.size());
          for (std::size_t e = 0; e < v.size(); ++e) abs_v[e] = std::fabs(v[e]);
          reference::attention(rs, qrow, k, abs_v, positions[i], r, scale, mean_abs_v);
        }
        const auto rounded_weights =
            rounds_weights(GetParam().backend, GetParam().format.name, dim_);
        const std::vector<std::size_t> visible =
            rounded_weights ? visible_slots(positions[i], r) : std::vector<std::size_t>{};
        for (std::uint32_t h = 0; h < qh; ++h) {
          const std::span<const float> q_head = qrow.subspan(h * dim_, dim_);
          const std::uint32_t kv_head = h / (qh / kvh);
          const double e =
              rounded_q ? query_rounding_bound(*rounded_q, q_head, k, kvh, kv_head, scale) : 0.0;
          const double w = rounded_weights ? std::exp(2.0 * e) *
                                                 weight_rounding_bound(
                                                     *rounded_weights, q_head, k, v, kvh, kv_head,
                                                     GetParam().format.options.value("group", 32u),
                                                     visible, scale)
                                           : 0.0;
          for (std::uint32_t d = 0; d < dim_; ++d) {
            weight_slack[h * dim_ + d] = static_cast<float>(w);
            slack[h * dim_ + d] =
                static_cast<float>(std::expm1(2.0 * e) * mean_abs_v[h * dim_ + d] + w);
          }
        }
        const auto& ok = original_k_[{ids[i], layer}];
        const auto& ov = original_v_[{ids[i], layer}];
        if (ok.size() == k.size())
          reference::attention(rs, qrow, ok, ov, positions[i], r, scale, loose);
        for (std::size_t e = 0; e < want.size(); ++e) {
          const float got = out[qi * qh * dim_ + e];
          ASSERT_NEAR(got, exact[e], 1e-3 + 1e-3 * std::fabs(exact[e]) + weight_slack[e])
              << mask_name << " seq " << i << " query " << j << " element " << e;
          ASSERT_NEAR(got, want[e], 1e-3 + 1e-3 * std::fabs(want[e]) + slack[e])
              << mask_name << " seq " << i << " query " << j << " element " << e;
          if (ok.size() == k.size()) {
            // The format's loss, plus what rounding q adds on top of it.
            ASSERT_NEAR(got, loose[e], format_tolerance(GetParam().format) + slack[e]) << mask_name;
          }
        }
      }
      if (scores) {
        const std::vector<float> after = store_->scores(ids[i]);
        for (std::size_t t = 0; t < n; ++t)
          ASSERT_NEAR(after[t] - scores_before[i][t], weights[t], 1e-4 + 1e-3 * weights[t])
              << "score of slot " << t;
      }
    }
  }

  const std::vector<std::pair<std::string, nlohmann::json>> masks_ = {
      {"causal", nlohmann::json::object()},
      {"sliding-window", {{"window", 13}}},
      {"sink-window", {{"sinks", 4}, {"window", 20}}},
      {"block-local", {{"block", 8}}},  // known to kernels only through its ranges
  };
  std::unique_ptr<CacheStore> store_;
  std::unique_ptr<Attention> attention_;
  std::mt19937 rng_{77};
  std::normal_distribution<float> normal_;
  std::map<std::pair<SeqId, std::uint32_t>, std::vector<float>> original_k_, original_v_;
};

TEST_P(AttentionConformance, DecodeRaggedBatch) {
  const SeqId a = store_->create_sequence(), b = store_->create_sequence(),
              c = store_->create_sequence();
  append({a}, 1);
  append({b}, 37);
  append({c}, 150);
  append({a, b, c}, 1);  // the decode step's own token
  for (const auto& [name, options] : masks_) check(name, options, 1, {a, b, c}, {}, false);
}

TEST_P(AttentionConformance, PrefillChunksSeeTheirOwnTokensCausally) {
  const SeqId a = store_->create_sequence(), b = store_->create_sequence();
  append({a}, 20);
  append({a, b}, 24);  // a chunk for both; b's is its whole prompt
  for (const auto& [name, options] : masks_) check(name, options, 0, {a, b}, {24, 24}, false);
}

TEST_P(AttentionConformance, PrefillOfNoQueriesForSomeOrAllSequences) {
  const SeqId a = store_->create_sequence(), b = store_->create_sequence();
  append({a, b}, 20);
  check("causal", nlohmann::json::object(), 0, {a, b}, {0, 5}, false);
  // None at all: nothing to compute and nothing written (the tensors still need their memory).
  const std::uint32_t qh = GetParam().heads.q;
  std::vector<float> q(qh * dim_, 0.0f), out(q.size(), NAN);
  std::int64_t shape[3] = {0, qh, dim_};
  DLTensor qt = host_tensor(q.data(), shape), ot = host_tensor(out.data(), shape);
  const std::vector<std::uint32_t> none = {0, 0};
  const std::vector<SeqId> ids = {a, b};
  AttentionRequest request = request_for(ids, qt, ot, {{}, {}, 1, {}});
  request.query_counts = none;
  attention_->prefill(*store_, request);
  for (float x : out) ASSERT_TRUE(std::isnan(x));
}

TEST_P(AttentionConformance, AccumulatedScoresEqualTheReferenceWeights) {
  const SeqId a = store_->create_sequence(), b = store_->create_sequence();
  append({a, b}, 45);
  check("sink-window", {{"sinks", 2}, {"window", 16}}, 1, {a, b}, {}, true);
  check("causal", nlohmann::json::object(), 1, {a, b}, {}, true);  // adds up
}

TEST_P(AttentionConformance, ScoresStayWithTheirSequenceAcrossSharedPages) {
  const SeqId a = store_->create_sequence();
  append({a}, 43);  // kivi-k (groups of 8): the fork also copies the half-filled group
  const SeqId b = store_->fork(a);  // shares every page with a
  original_k_.clear();
  original_v_.clear();
  check("causal", nlohmann::json::object(), 0, {b}, {}, true);
  for (float score : store_->scores(a)) EXPECT_EQ(score, 0.0f) << "b's attention landed on a";
}

TEST_P(AttentionConformance, LongSequenceSplitAcrossThreads) {
  const SeqId a = store_->create_sequence();
  append({a}, 1800);
  check("causal", nlohmann::json::object(), 0, {a}, {}, true);
  check("sink-window", {{"sinks", 4}, {"window", 700}}, 0, {a}, {}, false);
}

TEST_P(AttentionConformance, RunningMaximumRisesForSomeHeads) {
  // A query's largest logit rises past what its kernel's softmax lets pass (kRescaleSlack) a
  // few times along the sequence, at different blocks for different heads of a group.
  const SeqId a = store_->create_sequence();
  append({a}, 300, 0.02f);
  // Against the reference over the stored K/V only: the format's loss grows with the keys.
  original_k_.clear();
  original_v_.clear();
  check("causal", nlohmann::json::object(), 0, {a}, {}, false);
  check("sink-window", {{"sinks", 4}, {"window", 100}}, 1, {a}, {}, false);
}

TEST_P(AttentionConformance, QueryThatSeesNoKeysGetsZeros) {
  // As the reference: no weights, so nothing to average. Long enough to run on every thread.
  const SeqId a = store_->create_sequence(), b = store_->create_sequence();
  append({a, b}, 700);
  const std::uint32_t qh = GetParam().heads.q;
  std::vector<float> q(2 * qh * dim_), out(q.size(), NAN);
  for (float& x : q) x = normal_(rng_);
  std::int64_t shape[3] = {2, qh, dim_};
  DLTensor qt = host_tensor(q.data(), shape), ot = host_tensor(out.data(), shape);
  const std::vector<SeqId> ids = {a, b};
  const std::vector<PositionRange> ranges = {{0, 0}, {0, 700}};
  const std::vector<std::uint32_t> counts = {0, 1};
  attention_->decode(*store_, request_for(ids, qt, ot, {ranges, counts, 1, {}}));
  for (std::size_t e = 0; e < qh * dim_; ++e) ASSERT_EQ(out[e], 0.0f) << "element " << e;
  for (std::size_t e = qh * dim_; e < out.size(); ++e) ASSERT_TRUE(std::isfinite(out[e]));
}

TEST_P(AttentionConformance, CompactedSequenceUsesLogicalPositions) {
  if (store_format(with_codecs(store_spec_of(GetParam())), false).spec.groups_tokens())
    GTEST_SKIP() << GetParam().format.name << " cannot drop tokens one by one";
  const SeqId a = store_->create_sequence();
  append({a}, 60);
  store_->drop(a, std::vector<PositionRange>{{5, 25}});
  original_k_.clear();  // the float32 copies no longer line up with the slots
  original_v_.clear();
  append({a}, 1);
  for (const auto& [name, options] : masks_) check(name, options, 1, {a}, {}, false);
}

// RoPE positions within the cache (StreamingLLM): sinks + window with positions: cache, the query
// turned per range by the rotations the host makes, against the reference that turns the keys to
// their ranks instead, in both RoPE styles; for decode and prefill, a sequence too short to have
// a gap (no rotation), and one whose middle was dropped as streaming eviction drops it. A backend
// that does not declare query_rotation refuses such a request, saying so.
TEST_P(AttentionConformance, CachePositionsMatchTheStreamingReference) {
  if (store_format(with_codecs(store_spec_of(GetParam())), false).spec.groups_tokens())
    GTEST_SKIP() << GetParam().format.name << " cannot drop tokens one by one";
  const SeqId a = store_->create_sequence(), b = store_->create_sequence(),
              c = store_->create_sequence();
  append({a}, 150);
  append({b}, 12);
  append({c}, 200);
  store_->drop(c, std::vector<PositionRange>{{4, 170}});
  original_k_.clear();  // the float32 copies no longer line up with c's slots
  original_v_.clear();
  append({a, b, c}, 1);
  const auto mask =
      registry().create_mask("sink-window", {{"sinks", 4}, {"window", 20}, {"positions", "cache"}});
  const bool rotates =
      registry().find(ComponentKind::backend, GetParam().backend)->capabilities.query_rotation;
  const std::uint32_t qh = GetParam().heads.q, kvh = GetParam().heads.kv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim_));
  for (const RopeStyle style : {RopeStyle::neox, RopeStyle::gptj})
    for (const bool prefill : {false, true}) {
      if (prefill) append({a, c}, 6);
      const std::vector<SeqId> ids = prefill ? std::vector<SeqId>{a, c} : std::vector{a, b, c};
      const std::vector<std::uint32_t> per_seq(ids.size(), prefill ? 6 : 1);
      const Rope rope{10000.0, 0, style, {}};
      const std::vector<double> frequencies = rope_frequencies(rope, dim_);
      std::vector<Position> queries;
      std::vector<std::vector<Position>> positions;
      for (std::size_t i = 0; i < ids.size(); ++i) {
        positions.push_back(store_->positions(ids[i]));
        queries.insert(queries.end(), positions.back().end() - per_seq[i], positions.back().end());
      }
      std::vector<PositionRange> ranges(queries.size() * 2);
      std::vector<std::uint32_t> counts(queries.size());
      std::vector<Position> at(ranges.size());
      mask->visible(queries, ranges, counts);
      mask->query_positions(queries, ranges, counts, at);
      const RotationTable table = rotation_table(rope, frequencies, queries, counts, 2, at);
      ASSERT_FALSE(table.view().empty()) << "a and c have gaps between sinks and window";
      std::vector<float> q(queries.size() * qh * dim_), out(q.size(), NAN);
      for (float& x : q) x = normal_(rng_);
      std::int64_t shape[3] = {static_cast<std::int64_t>(queries.size()), qh, dim_};
      DLTensor qt = host_tensor(q.data(), shape), ot = host_tensor(out.data(), shape);
      AttentionRequest request = request_for(ids, qt, ot, {ranges, counts, 2, table.view()});
      request.layer = 1;
      if (prefill) request.query_counts = per_seq;
      const auto run = [&] {
        prefill ? attention_->prefill(*store_, request) : attention_->decode(*store_, request);
      };
      if (!rotates) {
        try {
          run();
          FAIL() << "a backend without query_rotation attended with rotations";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), Code::unsupported) << e.what();
          EXPECT_NE(std::string(e.what()).find("query_rotation"), std::string::npos) << e.what();
        }
        return;
      }
      run();
      const reference::AttentionShape rs{qh, kvh, dim_};
      const auto rounded_q = rounds_query(GetParam().backend, GetParam().format.name, false);
      const auto rounded_weights = rounds_weights(GetParam().backend, GetParam().format.name, dim_);
      std::size_t qi = 0;
      for (std::size_t i = 0; i < ids.size(); ++i) {
        const std::size_t n = positions[i].size();
        std::vector<float> k(n * row_floats()), v(k.size()), abs_v(k.size());
        std::int64_t kv_shape[3] = {static_cast<std::int64_t>(n), kvh, dim_};
        DLTensor kt = host_tensor(k.data(), kv_shape), vt = host_tensor(v.data(), kv_shape);
        store_->gather(1, ids[i], kt, vt);
        for (std::size_t e = 0; e < v.size(); ++e) abs_v[e] = std::fabs(v[e]);
        for (std::uint32_t j = 0; j < per_seq[i]; ++j, ++qi) {
          const std::span<const PositionRange> r(ranges.data() + qi * 2, counts[qi]);
          const std::span<const float> qrow(q.data() + qi * qh * dim_, qh * dim_);
          std::vector<float> want(qh * dim_), mean_abs_v(qh * dim_);
          reference::attention_at_cache_positions(rs, rope, qrow, queries[qi], k, v, positions[i],
                                                  r, scale, want);
          if (rounded_q)
            reference::attention_at_cache_positions(rs, rope, qrow, queries[qi], k, abs_v,
                                                    positions[i], r, scale, mean_abs_v);
          const std::vector<std::size_t> visible = visible_slots(positions[i], r);
          for (std::uint32_t h = 0; h < qh; ++h) {
            // A kernel that rounds q rounds each turned q: the worst of them bounds the logits.
            double e = 0.0;
            for (std::uint32_t k_range = 0; rounded_q && k_range < counts[qi]; ++k_range) {
              std::vector<float> head(qrow.begin() + h * dim_, qrow.begin() + (h + 1) * dim_);
              if (const std::uint32_t rot = table.range_rotation[qi * 2 + k_range]; rot != 0)
                table.view().rotate(rot - 1, head.data());
              e = std::max(e,
                           query_rounding_bound(*rounded_q, head, k, kvh, h / (qh / kvh), scale));
            }
            // Weights rounded: bounded as weight_rounding_bound does with the largest weight 1.
            double w = 0.0;
            if (rounded_weights) {
              const std::uint32_t group = GetParam().format.options.value("group", 32u);
              double top_step = 0.0;
              for (const std::size_t t : visible)
                for (std::uint32_t g = 0; g < dim_; g += group) {
                  const float* row = v.data() + (t * kvh + h / (qh / kvh)) * dim_ + g;
                  const auto [low, high] = std::minmax_element(row, row + group);
                  top_step = std::max(top_step, double{*high - *low} / 15.0);
                }
              w = std::exp(2.0 * e) * static_cast<double>(visible.size()) * 8.0 *
                  rounded_weights->error / rounded_weights->levels * top_step;
            }
            for (std::uint32_t d = 0; d < dim_; ++d) {
              const std::size_t el = h * dim_ + d;
              const double slack = std::expm1(2.0 * e) * mean_abs_v[el] + w;
              ASSERT_NEAR(out[qi * qh * dim_ + el], want[el],
                          1e-3 + 1e-3 * std::fabs(want[el]) + slack)
                  << to_string(style) << (prefill ? " prefill" : " decode") << " seq " << i
                  << " query " << j << " head " << h << " element " << d;
            }
          }
        }
      }
    }
}

// A small float32 store (pages of 8, 1 MiB) for the tests of one shape below.
StoreSpec small_fp32_spec(const ModelShape& model) {
  StoreSpec spec;
  spec.model = model;
  spec.page_size = 8;
  spec.k_format = spec.v_format = "fp32";
  spec.capacity_bytes = 1 << 20;
  return spec;
}

// A new sequence of n tokens in layer 0 with K and V drawn from N(0, 1), as appended
// ([n][kv_heads][head_dim] floats).
struct RandomSequence {
  SeqId id;
  std::vector<float> k, v;
};
RandomSequence random_sequence(CacheStore& store, const ModelShape& model, std::uint32_t n,
                               std::mt19937& rng) {
  RandomSequence s{store.create_sequence(),
                   std::vector<float>(std::size_t{n} * model.kv_heads * model.head_dim),
                   {}};
  s.v.resize(s.k.size());
  std::normal_distribution<float> normal;
  for (float& x : s.k) x = normal(rng);
  for (float& x : s.v) x = normal(rng);
  std::int64_t shape[3] = {n, model.kv_heads, model.head_dim};
  store.reserve(std::vector<SeqId>{s.id}, std::vector<std::uint32_t>{n});
  store.append(0, std::vector<SeqId>{s.id}, std::vector<std::uint32_t>{n},
               host_tensor(s.k.data(), shape), host_tensor(s.v.data(), shape));
  return s;
}

// Cases of one backend each, on shapes and formats of their own.
class AttentionOutputs : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { record_case(GetParam(), "fp32"); }
};

// Outputs in float16 and bfloat16, and the backend against a dense formulation with an
// explicit boolean mask like the seed's SlidingWindowAttention (kept causal for the first
// positions), on a small shape.
TEST_P(AttentionOutputs, HalfPrecisionOutputsAndDenseMask) {
  const std::string& backend = GetParam();
  const StoreSpec spec = small_fp32_spec({1, 4, 2, 16});
  const auto store = open_store(backend, spec);
  if (!store) GTEST_SKIP() << skip_reason(backend, spec);
  const auto attention = registry().create_backend(backend)->create_attention();
  const std::uint32_t n = 30, sinks = 3, window = 8;
  std::mt19937 rng(3);
  const auto [id, k, v] = random_sequence(*store, spec.model, n, rng);
  std::normal_distribution<float> normal;
  std::vector<float> q(4 * 16);
  for (float& x : q) x = normal(rng);
  // Dense: mask[t] for the query at position n - 1; softmax over allowed keys only.
  const Position query = n - 1;
  std::vector<float> dense(4 * 16, 0.0f);
  for (std::uint32_t h = 0; h < 4; ++h) {
    std::vector<double> w(n, 0.0);
    double top = -INFINITY, sum = 0;
    for (std::uint32_t t = 0; t < n; ++t) {
      const bool allowed = Position(t) < Position(sinks) || query - Position(t) < Position(window);
      if (!allowed) continue;
      double dot = 0;
      for (int i = 0; i < 16; ++i) dot += double(q[h * 16 + i]) * k[(t * 2 + h / 2) * 16 + i];
      w[t] = dot / 4.0;
      top = std::max(top, w[t]);
    }
    for (std::uint32_t t = 0; t < n; ++t) {
      const bool allowed = Position(t) < Position(sinks) || query - Position(t) < Position(window);
      w[t] = allowed ? std::exp(w[t] - top) : 0.0;
      sum += w[t];
    }
    for (std::uint32_t t = 0; t < n; ++t)
      for (int i = 0; i < 16; ++i)
        dense[h * 16 + i] += float(w[t] / sum * v[(t * 2 + h / 2) * 16 + i]);
  }
  const std::vector<PositionRange> ranges{{0, sinks}, {query - window + 1, query + 1}};
  const std::vector<std::uint32_t> counts{2};
  std::int64_t q_shape[3] = {1, 4, 16};
  DLTensor qt = host_tensor(q.data(), q_shape);
  for (const auto& [code, bits] :
       {std::pair{kDLFloat, 32}, std::pair{kDLFloat, 16}, std::pair{kDLBfloat, 16}}) {
    std::vector<std::uint32_t> raw(4 * 16, 0);  // room for either width
    DLTensor ot = host_tensor(reinterpret_cast<float*>(raw.data()), q_shape);
    ot.dtype = {static_cast<std::uint8_t>(code), static_cast<std::uint8_t>(bits), 1};
    const std::vector<SeqId> ids{id};
    attention->decode(*store, request_for(ids, qt, ot, {ranges, counts, 2, {}}));
    for (std::size_t e = 0; e < dense.size(); ++e) {
      float got;
      if (bits == 32) {
        std::memcpy(&got, reinterpret_cast<const float*>(raw.data()) + e, 4);
      } else {
        const std::uint16_t h = reinterpret_cast<const std::uint16_t*>(raw.data())[e];
        got = code == kDLFloat ? float_from_fp16(h) : float_from_bf16(h);
      }
      const double tolerance = bits == 32 ? 1e-4 : (code == kDLFloat ? 2e-3 : 1e-2);
      ASSERT_NEAR(got, dense[e], tolerance * (1 + std::fabs(dense[e])))
          << backend << " bits " << bits << " element " << e;
    }
  }
}

// More query heads per KV head than a GPU work item takes (8): the group is split into head
// chunks there, and each chunk must still see every key. 16 heads on one KV head, two sequences.
TEST_P(AttentionOutputs, WideGroupsMatchTheReference) {
  const std::string& backend = GetParam();
  const StoreSpec spec = small_fp32_spec({1, 16, 1, 32});
  const auto store = open_store(backend, spec);
  if (!store) GTEST_SKIP() << skip_reason(backend, spec);
  const auto attention = registry().create_backend(backend)->create_attention();
  std::mt19937 rng(8);
  std::normal_distribution<float> normal;
  const std::vector<std::uint32_t> lengths{21, 70};
  std::vector<SeqId> ids;
  std::vector<std::vector<float>> ks, vs;
  for (const std::uint32_t n : lengths) {
    RandomSequence s = random_sequence(*store, spec.model, n, rng);
    ids.push_back(s.id);
    ks.push_back(std::move(s.k));
    vs.push_back(std::move(s.v));
  }
  std::vector<float> q(2 * 16 * 32), out(q.size(), NAN);
  for (float& x : q) x = normal(rng);
  const std::vector<PositionRange> ranges{{0, 21}, {0, 70}};
  const std::vector<std::uint32_t> counts{1, 1};
  std::int64_t q_shape[3] = {2, 16, 32};
  DLTensor qt = host_tensor(q.data(), q_shape), ot = host_tensor(out.data(), q_shape);
  attention->decode(*store, request_for(ids, qt, ot, {ranges, counts, 1, {}}));
  for (std::size_t i = 0; i < ids.size(); ++i) {
    std::vector<Position> positions(lengths[i]);
    for (std::uint32_t t = 0; t < lengths[i]; ++t) positions[t] = t;
    std::vector<float> want(16 * 32);
    reference::attention({16, 1, 32}, std::span<const float>(q.data() + i * 16 * 32, 16 * 32),
                         ks[i], vs[i], positions, std::span<const PositionRange>(&ranges[i], 1),
                         1.0f / std::sqrt(32.0f), want);
    for (std::size_t e = 0; e < want.size(); ++e)
      ASSERT_NEAR(out[i * 16 * 32 + e], want[e], 1e-3 + 1e-3 * std::fabs(want[e]))
          << backend << " sequence " << i << " element " << e;
  }
}

// Requests every backend refuses with what is wrong named: visible ranges that overlap, go back,
// run backwards or exceed max_ranges (a kernel would count keys twice or miss some), and q or out
// of another rank, extent or layout than [queries, q_heads, head_dim] row-major (the strides of a
// tensor of another rank are never read).
TEST_P(AttentionOutputs, RejectsMalformedRequests) {
  const std::string& backend = GetParam();
  const StoreSpec spec = small_fp32_spec({1, 4, 2, 32});
  const auto store = open_store(backend, spec);
  if (!store) GTEST_SKIP() << skip_reason(backend, spec);
  const auto attention = registry().create_backend(backend)->create_attention();
  std::mt19937 rng(9);
  const std::vector<SeqId> ids{random_sequence(*store, spec.model, 30, rng).id};
  std::vector<float> q(4 * 32, 0.5f), out(q.size());
  std::int64_t shape[3] = {1, 4, 32}, flat[2] = {4, 32}, wide[3] = {1, 4, 64};
  std::int64_t transposed[3] = {128, 1, 4};  // strides of [1][32][4]
  const DLTensor qt = host_tensor(q.data(), shape), ot = host_tensor(out.data(), shape);
  const auto refused = [&](DLTensor q_in, DLTensor out_in, std::vector<PositionRange> ranges,
                           std::uint32_t count, const std::string& message) {
    const std::vector<std::uint32_t> counts{count};
    try {
      attention->decode(*store, request_for(ids, q_in, out_in, {ranges, counts, 2, {}}));
      ADD_FAILURE() << backend << " accepted " << message;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::invalid_argument) << backend;
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos)
          << backend << ": " << e.what();
    }
  };
  refused(qt, ot, {{0, 10}, {5, 20}}, 2, "query 0: [5, 20) overlaps or precedes [0, 10)");
  refused(qt, ot, {{12, 20}, {0, 4}}, 2, "[0, 4) overlaps or precedes [12, 20)");
  refused(qt, ot, {{9, 3}, {20, 25}}, 2, "[9, 3) ends before it begins");
  refused(qt, ot, {{0, 4}, {8, 9}, {20, 25}}, 3, "3 ranges, more than max_ranges (2)");
  const std::vector<PositionRange> all{{0, 30}, {30, 30}};
  refused(host_tensor(q.data(), flat, 2), ot, all, 1, "q must be [1, 4, 32], row-major");
  refused(host_tensor(q.data(), wide), ot, all, 1, "q must be [1, 4, 32], row-major");
  DLTensor strided = qt;
  strided.strides = transposed;
  refused(strided, ot, all, 1, "q must be [1, 4, 32], row-major");
  refused(qt, host_tensor(out.data(), flat, 2), all, 1, "out must be [1, 4, 32], row-major");
}

// Quantized values with fp16 keys (q is not rounded), under weights from uniform (q = 0) to
// sharply peaked (q x 40: within a block one token takes nearly all), so that a kernel rounding
// the weights of a block (cpu-tbb: to int16 against the largest of two blocks, int4 values with
// AVX-512 to bytes against a span's) is seen at both ends: 1e-3 against the reference over the
// stored values (plus weight_rounding_bound for byte weights), head_dim 128, a ragged 301 tokens.
TEST_P(AttentionOutputs, QuantizedValuesUnderUniformAndPeakedWeights) {
  const std::string& backend = GetParam();
  std::string skipped;  // the formats this backend does not run, and why
  int ran = 0;
  for (const std::string v_format : {"int8-per-token", "int4-group", "fp8-e4m3"}) {
    StoreSpec spec;
    spec.model = {1, 8, 2, 128};
    spec.page_size = 16;
    spec.k_format = "fp16";
    spec.v_format = v_format;
    spec.capacity_bytes = 8 << 20;
    spec.poison_unused = true;
    const auto store = open_store(backend, spec);
    if (!store) {
      skipped += skip_reason(backend, spec) + "; ";
      continue;
    }
    ++ran;
    const auto attention = registry().create_backend(backend)->create_attention();
    std::mt19937 rng(11);
    std::normal_distribution<float> normal;
    const std::uint32_t n = 301;
    const SeqId id = random_sequence(*store, spec.model, n, rng).id;
    std::vector<float> stored_k(std::size_t{n} * 2 * 128), stored_v(stored_k.size());
    std::int64_t shape[3] = {n, 2, 128};
    DLTensor kt = host_tensor(stored_k.data(), shape), vt = host_tensor(stored_v.data(), shape);
    store->gather(0, id, kt, vt);
    std::vector<Position> positions(n);
    for (std::uint32_t t = 0; t < n; ++t) positions[t] = t;
    std::vector<float> base(8 * 128);
    for (float& x : base) x = normal(rng);
    for (const float sharpness : {0.0f, 1.0f, 40.0f}) {
      std::vector<float> q(base.size()), out(q.size(), NAN), want(q.size());
      for (std::size_t i = 0; i < q.size(); ++i) q[i] = base[i] * sharpness;
      const std::vector<PositionRange> ranges{{0, n}};
      const std::vector<std::uint32_t> counts{1};
      std::int64_t q_shape[3] = {1, 8, 128};
      DLTensor qt = host_tensor(q.data(), q_shape), ot = host_tensor(out.data(), q_shape);
      const std::vector<SeqId> ids{id};
      attention->decode(*store, request_for(ids, qt, ot, {ranges, counts, 1, {}}));
      reference::attention({8, 2, 128}, q, stored_k, stored_v, positions, ranges,
                           1.0f / std::sqrt(128.0f), want);
      std::vector<std::size_t> all(n);
      std::iota(all.begin(), all.end(), std::size_t{0});
      for (std::uint32_t h = 0; h < 8; ++h) {
        const auto rounding = rounds_weights(backend, v_format, 128);
        const double slack =
            rounding ? weight_rounding_bound(
                           *rounding, std::span<const float>(q).subspan(h * 128, 128), stored_k,
                           stored_v, 2, h / 4, 32, all, 1.0 / std::sqrt(128.0))
                     : 0.0;
        for (std::size_t e = h * 128; e < (h + 1) * 128; ++e)
          ASSERT_NEAR(out[e], want[e], 1e-3 + 1e-3 * std::fabs(want[e]) + slack)
              << backend << " " << v_format << " x" << sharpness << " element " << e;
      }
    }
  }
  if (ran == 0) GTEST_SKIP() << skipped;
  if (!skipped.empty()) RecordProperty("not_run", skipped);
}

INSTANTIATE_TEST_SUITE_P(Backends, AttentionConformance, ::testing::ValuesIn(attention_cases()),
                         case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(AttentionConformance);
// With one format chosen (Setup::format), only the cases that store it.
std::vector<std::string> output_backends() {
  return setup().format.empty() ? backend_names() : std::vector<std::string>{};
}
INSTANTIATE_TEST_SUITE_P(Backends, AttentionOutputs, ::testing::ValuesIn(output_backends()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return test_name(info.param);
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(AttentionOutputs);

}  // namespace
}  // namespace kvcache::conformance
