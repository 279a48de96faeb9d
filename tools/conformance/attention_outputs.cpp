// Attention cases of one backend each, on shapes and formats of their own: float16 and bfloat16
// outputs against a dense mask, query-head groups wider than a GPU work item, malformed requests
// refused by name, quantized values under uniform and peaked weights.
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
#include "kvcache/query_rotation.hpp"
#include "kvcache/reference_attention.hpp"

namespace kvcache::conformance {
namespace {

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
    attend(*attention, *store, 0, ids, {}, {ranges, counts, 2, {}}, false, qt, ot);
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
  attend(*attention, *store, 0, ids, {}, {ranges, counts, 1, {}}, false, qt, ot);
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
      attend(*attention, *store, 0, ids, {}, {ranges, counts, 2, {}}, false, q_in, out_in);
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
      attend(*attention, *store, 0, ids, {}, {ranges, counts, 1, {}}, false, qt, ot);
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
