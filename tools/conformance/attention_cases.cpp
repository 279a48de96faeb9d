// Every backend's attention against the reference, through the real loader: every format (int4
// in groups of 32, 64 and 128) x MHA/GQA/MQA x masks (causal, sliding window, sinks + window) x
// page sizes 8..64, ragged lengths, decode and prefill, compacted sequences, long sequences split
// across threads, and accumulated scores. Unused slots hold NaN, so a read of padding would show.
// Kernels that round q to int8 (integer dot products) are checked against the rounded q and held to
// a derived bound against q itself (error_bounds.hpp).
//
// How to add a case: a TEST_P of AttentionConformance runs on every cell of the matrix
// (attention_matrix.hpp: backend x format x heads x page size x head dim); build its store with
// store_spec_of(GetParam()) and check through the fixture's helpers, which hold each output to the
// reference within the bounds the backend declares. A case of one backend on a shape of its own
// goes to attention_outputs.cpp (AttentionOutputs), a case of the Cache's layer groups to
// hybrid_cases.cpp.
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

#include "attention_matrix.hpp"
#include "error_bounds.hpp"
#include "fixture.hpp"
#include "kvcache/formats.hpp"
#include "kvcache/numeric.hpp"
#include "kvcache/reference_attention.hpp"
#include "kvcache/rope.hpp"

namespace kvcache::conformance {
namespace {

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

  // What a kernel that rounds q or the weights may err by, per output element of one query
  // (`slack`: against the reference for q itself; `weights`: for the rounded q), and in `exact`
  // the reference for the rounded q (left as it is when q is not rounded).
  struct Slack {
    std::vector<float> slack, weights;
  };
  Slack slack_for(std::span<const float> qrow, const std::vector<float>& k,
                  const std::vector<float>& v, const std::vector<Position>& positions,
                  std::span<const PositionRange> r, bool scores, std::vector<float>& exact) const {
    const std::uint32_t qh = GetParam().heads.q, kvh = GetParam().heads.kv;
    const reference::AttentionShape rs{qh, kvh, dim_};
    const float scale = 1.0f / std::sqrt(static_cast<float>(dim_));
    Slack out{std::vector<float>(qh * dim_, 0.0f), std::vector<float>(qh * dim_, 0.0f)};
    const auto rounded_q = rounds_query(GetParam().backend, GetParam().format.name, scores);
    std::vector<float> mean_abs_v(qh * dim_);
    if (rounded_q) {
      reference::attention(rs, round_query(*rounded_q, qrow), k, v, positions, r, scale, exact);
      std::vector<float> abs_v(v.size());
      for (std::size_t e = 0; e < v.size(); ++e) abs_v[e] = std::fabs(v[e]);
      reference::attention(rs, qrow, k, abs_v, positions, r, scale, mean_abs_v);
    }
    const auto rounded_weights = rounds_weights(GetParam().backend, GetParam().format.name, dim_);
    const std::vector<std::size_t> visible =
        rounded_weights ? visible_slots(positions, r) : std::vector<std::size_t>{};
    for (std::uint32_t h = 0; h < qh; ++h) {
      const std::span<const float> q_head = qrow.subspan(h * dim_, dim_);
      const std::uint32_t kv_head = h / (qh / kvh);
      const double e =
          rounded_q ? query_rounding_bound(*rounded_q, q_head, k, kvh, kv_head, scale) : 0.0;
      const double w = rounded_weights
                           ? std::exp(2.0 * e) * weight_rounding_bound(
                                                     *rounded_weights, q_head, k, v, kvh, kv_head,
                                                     GetParam().format.options.value("group", 32u),
                                                     visible, scale)
                           : 0.0;
      for (std::uint32_t d = 0; d < dim_; ++d) {
        out.weights[h * dim_ + d] = static_cast<float>(w);
        out.slack[h * dim_ + d] =
            static_cast<float>(std::expm1(2.0 * e) * mean_abs_v[h * dim_ + d] + w);
      }
    }
    return out;
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
    attend(*attention_, *store_, layer, ids, query_counts, {ranges, counts, max_ranges, {}}, scores,
           qt, ot);

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
        std::vector<float> exact = want;
        const Slack bound = slack_for(qrow, k, v, positions[i], r, scores, exact);
        const std::vector<float>&slack = bound.slack, &weight_slack = bound.weights;
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
  attend(*attention_, *store_, 0, ids, none, {{}, {}, 1, {}}, false, qt, ot);
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
  attend(*attention_, *store_, 0, ids, {}, {ranges, counts, 1, {}}, false, qt, ot);
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

// What rounding the weights may add to an output element of a KV head whose largest weight is
// 1: as weight_rounding_bound, from the largest int4 step of the visible rows' groups.
double unit_weight_rounding_bound(const WeightRounding& rounding, const std::vector<float>& v,
                                  const std::vector<std::size_t>& visible, std::uint32_t kv_heads,
                                  std::uint32_t kv_head, std::uint32_t dim, std::uint32_t group) {
  double top_step = 0.0;
  for (const std::size_t t : visible)
    for (std::uint32_t g = 0; g < dim; g += group) {
      const float* row = v.data() + (t * kv_heads + kv_head) * dim + g;
      const auto [low, high] = std::minmax_element(row, row + group);
      top_step = std::max(top_step, double{*high - *low} / 15.0);
    }
  return static_cast<double>(visible.size()) * 8.0 * rounding.error / rounding.levels * top_step;
}

// A kernel that rounds q rounds each turned q of a query (`ranges` of them, rotations at
// query * 2 in `table`): the worst of them bounds the logits of a head.
double turned_query_rounding_bound(const QueryRounding& rounding, const RotationTable& table,
                                   std::size_t query, std::uint32_t ranges,
                                   std::span<const float> q_head, const std::vector<float>& k,
                                   std::uint32_t kv_heads, std::uint32_t kv_head, float scale) {
  double e = 0.0;
  for (std::uint32_t range = 0; range < ranges; ++range) {
    std::vector<float> head(q_head.begin(), q_head.end());
    if (const std::uint32_t rot = table.range_rotation[query * 2 + range]; rot != 0)
      table.view().rotate(rot - 1, head.data());
    e = std::max(e, query_rounding_bound(rounding, head, k, kv_heads, kv_head, scale));
  }
  return e;
}

// A backend that does not declare query_rotation refuses rotations, saying so.
template <class Run>
void expect_rotations_refused(Run&& run) {
  try {
    run();
    FAIL() << "a backend without query_rotation attended with rotations";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("query_rotation"), std::string::npos) << e.what();
  }
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
      const auto run = [&] {
        attend(*attention_, *store_, 1, ids,
               prefill ? std::span<const std::uint32_t>(per_seq) : std::span<const std::uint32_t>(),
               {ranges, counts, 2, table.view()}, false, qt, ot);
      };
      if (!rotates) return expect_rotations_refused(run);
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
            const double e = rounded_q
                                 ? turned_query_rounding_bound(*rounded_q, table, qi, counts[qi],
                                                               qrow.subspan(h * dim_, dim_), k, kvh,
                                                               h / (qh / kvh), scale)
                                 : 0.0;
            // Weights rounded: bounded as weight_rounding_bound does with the largest weight 1.
            const double w =
                rounded_weights
                    ? std::exp(2.0 * e) * unit_weight_rounding_bound(
                                              *rounded_weights, v, visible, kvh, h / (qh / kvh),
                                              dim_, GetParam().format.options.value("group", 32u))
                    : 0.0;
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

INSTANTIATE_TEST_SUITE_P(Backends, AttentionConformance, ::testing::ValuesIn(attention_cases()),
                         case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(AttentionConformance);

}  // namespace
}  // namespace kvcache::conformance
