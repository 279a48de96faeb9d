// A cache of several layer groups on every backend, through Cache::open: two sliding-window
// layers (window 20, fp32) to one global layer (fp16), twice over. Every layer's attention equals
// the reference over what its own group holds, under its own mask, for prefill and decode steps
// of two sequences and a fork; and after every step the sliding group holds no more than its
// window's pages, while the global group holds every token.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fixture.hpp"
#include "kvcache/cache.hpp"
#include "kvcache/reference_attention.hpp"

namespace kvcache::conformance {
namespace {

constexpr std::uint32_t kLayers = 6, kQHeads = 4, kKvHeads = 2, kDim = 32, kPage = 8;
constexpr Position kWindow = 20;

class HybridConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    StoreSpec spec;
    spec.model = {kLayers, kQHeads, kKvHeads, kDim};
    spec.page_size = kPage;
    spec.k_format = spec.v_format = "fp16";
    if (const std::string why = skip_reason(GetParam(), spec); !why.empty()) GTEST_SKIP() << why;
    record_case(GetParam(), "fp32 (sliding), fp16 (global)");
    const std::string yaml =
        "model: {layers: 6, q_heads: 4, kv_heads: 2, head_dim: 32}\n"
        "backend: [" +
        GetParam() +
        "]\n"
        "cache: {page_size: 8, capacity: 2MiB, prefix_caching: false}\n"
        "format: fp16\n"
        "layers:\n"
        "  groups:\n"
        "    local: {mask: {name: sliding-window, window: 20}, format: fp32}\n"
        "    global: {}\n"
        "  pattern: [local x2, global]\n"
        "  context: 256\n";
    cache_ = Cache::open(parse_config(yaml, "hybrid_cases.yaml", {}), shared_registry());
  }

  // The visible positions of a query at `q` in `layer`.
  static PositionRange visible(std::uint32_t layer, Position q) {
    const bool global = layer % 3 == 2;
    return {global ? 0 : std::max<Position>(0, q - kWindow + 1), q + 1};
  }

  // One step of counts[i] new tokens for ids[i]: each layer's output is checked against the
  // reference over what the layer's group holds, before the step finishes (when the window's
  // pages behind it are still there for this step's queries).
  void step(const std::vector<SeqId>& ids, const std::vector<std::uint32_t>& counts) {
    Step s = cache_->begin_step(ids, counts);
    const auto rows = static_cast<std::int64_t>(s.tokens());
    std::normal_distribution<float> normal;
    for (std::uint32_t layer = 0; layer < kLayers; ++layer) {
      std::vector<float> k(rows * kKvHeads * kDim), v(k.size()), q(rows * kQHeads * kDim),
          out(q.size());
      for (auto* x : {&k, &v, &q})
        for (float& e : *x) e = normal(rng_);
      s.append(layer, Tensor::host(k.data(), {rows, kKvHeads, kDim}),
               Tensor::host(v.data(), {rows, kKvHeads, kDim}));
      Tensor o = Tensor::host(out.data(), {rows, kQHeads, kDim});
      s.prefill(layer, Tensor::host(q.data(), {rows, kQHeads, kDim}), o);
      const LayerPlace at = cache_->place(layer);
      const CacheStore& store = cache_->group_store(at.group);
      std::size_t row = 0;
      for (std::size_t i = 0; i < ids.size(); ++i) {
        const std::vector<Position> positions = store.positions(ids[i]);
        const auto n = static_cast<std::int64_t>(positions.size());
        std::vector<float> held_k(n * kKvHeads * kDim), held_v(held_k.size());
        Tensor kt = Tensor::host(held_k.data(), {n, kKvHeads, kDim});
        Tensor vt = Tensor::host(held_v.data(), {n, kKvHeads, kDim});
        store.gather(at.layer, ids[i], kt, vt);
        for (std::uint32_t j = 0; j < counts[i]; ++j, ++row) {
          const Position p = positions[positions.size() - counts[i] + j];
          const PositionRange range = visible(layer, p);
          std::vector<float> want(kQHeads * kDim);
          const std::span<const float> query(q.data() + row * kQHeads * kDim, kQHeads * kDim);
          reference::attention({kQHeads, kKvHeads, kDim}, query, held_k, held_v, positions,
                               std::span<const PositionRange>(&range, 1),
                               1.0f / std::sqrt(static_cast<float>(kDim)), want);
          for (std::size_t e = 0; e < want.size(); ++e)
            ASSERT_NEAR(out[row * kQHeads * kDim + e], want[e], 2e-3 + 2e-3 * std::fabs(want[e]))
                << "layer " << layer << " sequence " << ids[i] << " position " << p;
        }
      }
    }
    EXPECT_TRUE(s.finish().empty());
  }

  // What each group holds of `id`, whose next position is `next`: the global group every
  // position, the sliding group a run of whole pages that covers the next query's window.
  void expect_held(SeqId id, Position next) {
    for (std::size_t g = 0; g < cache_->groups().size(); ++g) {
      const LayerGroupInfo& group = cache_->groups()[g];
      const std::vector<Position> held = cache_->group_store(g).positions(id);
      ASSERT_FALSE(held.empty());
      EXPECT_EQ(held.back(), next - 1) << group.name;
      if (!group.frees_pages) {
        EXPECT_EQ(held.size(), static_cast<std::size_t>(next)) << group.name;
        continue;
      }
      EXPECT_LE(held.front(), std::max<Position>(0, next - kWindow + 1)) << "window lost";
      EXPECT_LE(held.size(), std::size_t{(kWindow + kPage - 1) / kPage + 1} * kPage)
          << "sequence " << id << " keeps pages behind its window at " << next;
    }
  }

  std::mt19937 rng_{7};
  std::unique_ptr<Cache> cache_;
};

TEST_P(HybridConformance, EachLayerAttendsUnderItsOwnMask) {
  ASSERT_EQ(cache_->groups().size(), 2u);
  EXPECT_TRUE(cache_->groups()[0].frees_pages);
  EXPECT_FALSE(cache_->groups()[1].frees_pages);
  const SeqId a = cache_->add_sequence(), b = cache_->add_sequence();
  step({a, b}, {29, 13});
  step({b}, {12});
  const SeqId c = cache_->fork(b);  // shares b's pages, copies on write
  Position next_a = 29, next_b = 25, next_c = 25;
  for (int i = 0; i < 40; ++i) {
    step({a, b, c}, {1, 1, 1});
    ++next_a, ++next_b, ++next_c;
    expect_held(a, next_a);
    expect_held(b, next_b);
    expect_held(c, next_c);
  }
  step({c, a}, {9, 3});  // a prefill step after the windows have moved on
  next_c += 9, next_a += 3;
  expect_held(a, next_a);
  expect_held(c, next_c);
}

TEST_P(HybridConformance, ASlidingGroupsPagesStayWithinItsWindow) {
  const SeqId a = cache_->add_sequence();
  step({a}, {5});
  for (Position next = 6; next <= 200; ++next) {
    step({a}, {1});
    expect_held(a, next);
  }
  const std::uint64_t window_pages = (kWindow + kPage - 1) / kPage + 1;
  EXPECT_LE(cache_->group_store(0).stats().used_pages, window_pages);
  EXPECT_EQ(cache_->group_store(1).stats().used_pages, (200u + kPage - 1) / kPage);
}

// Its formats are fp32 and fp16: with one other format chosen (Setup::format), none.
std::vector<std::string> hybrid_backends() {
  return wanted("fp32", "fp16") ? backend_names() : std::vector<std::string>{};
}
INSTANTIATE_TEST_SUITE_P(Backends, HybridConformance, ::testing::ValuesIn(hybrid_backends()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return test_name(info.param);
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(HybridConformance);

}  // namespace
}  // namespace kvcache::conformance
