// Prefix reuse in a cache of a sliding group and a global one (docs/cache.md, "Prefix reuse with
// layer groups"): the tokens given to match_prefix are published before the window frees their
// pages, a later hit needs only the window before its end in the sliding group and gives the
// outputs that computing the tokens gives, and a hit counts only as far as every group serves it
// (pages published after the window freed them serve none); through the remote tier, a cache
// elsewhere pulls only the window's pages of the sliding group.
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "hybrid_fixture.hpp"
#include "kvcache/backend.hpp"
#include "kvcache/forwarding_store.hpp"

namespace kvcache {
namespace {

using namespace hybrid;

constexpr std::uint32_t kPage = 8, kPrompt = 64;

std::vector<std::int32_t> prompt_ids() {
  std::vector<std::int32_t> ids;
  for (std::int32_t i = 0; i < static_cast<std::int32_t>(kPrompt); ++i) ids.push_back(i * 7 + 3);
  return ids;
}

// The largest difference between each layer's outputs of a step and those of the last tokens of
// a longer step (`computed`), in the layout run_rows returns.
double worst_difference(const std::vector<float>& reused, const std::vector<float>& computed) {
  const std::size_t per_layer = reused.size() / kLayers;
  const std::size_t tail = computed.size() / kLayers - per_layer;
  double worst = 0;
  for (std::uint32_t layer = 0; layer < kLayers; ++layer)
    for (std::size_t i = 0; i < per_layer; ++i)
      worst = std::max<double>(worst, std::abs(reused[layer * per_layer + i] -
                                               computed[layer * (per_layer + tail) + tail + i]));
  return worst;
}

class HybridPrefix : public HybridOn {
 protected:
  // A cache whose first sequence prefilled the prompt in chunks of 16 and was released. With
  // `declared`, the engine gave the prompt to match_prefix first (which found nothing); without,
  // it published the prompt only after the prefill.
  void prefill(bool declared) {
    cache_ = open_yaml(hybrid_yaml(GetParam(), "", "", "true"));
    const SeqId a = cache_->add_sequence();
    if (declared) {
      ASSERT_EQ(cache_->match_prefix(a, ids_), 0u);
    }
    for (std::uint32_t chunk = 0; chunk < 4; ++chunk) {
      const Rows rows(16, 100 + chunk);
      last_ = rows;
      outputs_ = run_rows(*cache_, a, rows);
    }
    // The sliding group (window 20) kept only its last pages.
    EXPECT_EQ(cache_->group_store(0).positions(a).front(), 40);
    if (!declared) cache_->publish_prefix(a, ids_);
    cache_->release(a);
  }
  std::vector<std::int32_t> ids_ = prompt_ids();
  std::unique_ptr<Cache> cache_;
  Rows last_{16, 0};            // the rows of the last chunk: positions 48..63
  std::vector<float> outputs_;  // its outputs, every layer
};

TEST_P(HybridPrefix, AHitNeedsOnlyTheWindowBeforeItsEndAndGivesTheComputedOutputs) {
  prefill(true);
  const SeqId b = cache_->add_sequence();
  const auto first = std::span<const std::int32_t>(ids_).first(kPrompt - 1);
  EXPECT_EQ(cache_->lookup_prefix(first), 56u);
  ASSERT_EQ(cache_->match_prefix(b, first), 56u);
  // A query at 56 sees 37..56: the sliding group holds pages 4..6 alone, the global one all 7.
  const std::vector<Position> local = cache_->group_store(0).positions(b);
  ASSERT_EQ(local.size(), 3u * kPage);
  EXPECT_EQ(local.front(), 32);
  EXPECT_EQ(cache_->group_store(1).positions(b).size(), 56u);
  // The prompt's last 8 tokens on the reused pages give what computing all of them gave.
  const std::vector<float> reused = run_rows(*cache_, b, Rows(last_, 8));
  EXPECT_LT(worst_difference(reused, outputs_), 1e-5);
}

TEST_P(HybridPrefix, AHitCountsOnlyAsFarAsEverySlidingGroupHoldsItsWindow) {
  prefill(false);  // the sliding group's pages 0..4 were freed unpublished
  const std::vector<std::int32_t> forty(ids_.begin(), ids_.begin() + 40);
  EXPECT_EQ(cache_->group_store(1).lookup_prefix(forty), 40u);  // the global group could serve
  // A query at 40 sees 21..40, in pages 2..4; each shorter hit needs a page before those.
  EXPECT_EQ(cache_->lookup_prefix(forty), 0u);
  const SeqId b = cache_->add_sequence();
  EXPECT_EQ(cache_->match_prefix(b, forty), 0u);
  for (std::size_t g = 0; g < 2; ++g) EXPECT_EQ(cache_->group_store(g).length(b), 0u) << g;
  // The whole prompt hits: a query at 64 sees 45..64, in pages 5..7, which were published.
  const SeqId c = cache_->add_sequence();
  EXPECT_EQ(cache_->match_prefix(c, ids_), 64u);
  EXPECT_EQ(cache_->group_store(0).positions(c).front(), 40);
}

TEST_P(HybridPrefix, ACacheElsewhereGetsTheWindowsPagesFromTheRemoteTierAlone) {
  const std::string remote =
      "remote: {transport: memory, endpoints: [hybrid-" + GetParam() + "], model: m}\n";
  const auto writer = open_yaml(hybrid_yaml(GetParam(), remote, "", "true"));
  const SeqId a = writer->add_sequence();
  ASSERT_EQ(writer->match_prefix(a, ids_), 0u);
  for (std::uint32_t chunk = 0; chunk < 4; ++chunk)
    outputs_ = run_rows(*writer, a, last_ = Rows(16, 100 + chunk));
  ASSERT_TRUE(writer->flush_remote(std::chrono::seconds(10)));
  EXPECT_EQ(writer->remote_stats()->written_pages, 8u + 8u);  // each group's 8 pages

  const auto reader = open_yaml(hybrid_yaml(GetParam(), remote, "", "true"));
  const SeqId b = reader->add_sequence();
  const auto first = std::span<const std::int32_t>(ids_).first(kPrompt - 1);
  EXPECT_EQ(reader->lookup_prefix(first), 56u);
  ASSERT_EQ(reader->match_prefix(b, first), 56u);
  // The global group pulled its 7 pages; the sliding group only the 3 its window needs.
  EXPECT_EQ(reader->remote_stats()->hit_pages, 7u + 3u);
  EXPECT_EQ(reader->group_store(0).positions(b).front(), 32);
  const std::vector<float> reused = run_rows(*reader, b, Rows(last_, 8));
  EXPECT_LT(worst_difference(reused, outputs_), 1e-5);
}

// A store before ABI 1.9: the CacheStore defaults, from its contiguous prefix alone.
class StoreBefore19 final : public ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  std::vector<std::uint8_t> prefix_pages(std::span<const std::int32_t> ids) const override {
    return CacheStore::prefix_pages(ids);
  }
  bool attach_prefix(SeqId id, std::span<const std::int32_t> ids,
                     std::span<const std::uint64_t> pages) override {
    return CacheStore::attach_prefix(id, ids, pages);
  }
};

TEST(HybridPrefixBefore19, TheDefaultsServeAWindowFromTheContiguousRun) {
  StoreSpec spec;
  spec.model = {1, 1, 1, kDim};
  spec.page_size = kPage;
  spec.capacity_bytes = 1 << 20;
  StoreBefore19 store(testing::test_registry()->create_backend("cpu-tbb")->create_store(spec));
  const SeqId a = store.create_sequence();
  const std::uint32_t tokens = 4 * kPage;
  store.reserve(std::vector<SeqId>{a}, std::vector<std::uint32_t>{tokens});
  std::vector<float> rows(std::size_t{tokens} * kDim, 0.5f);
  std::int64_t shape[3] = {tokens, 1, kDim};
  const DLTensor k = host_tensor(rows.data(), shape), v = k;
  store.append(0, std::vector<SeqId>{a}, std::vector<std::uint32_t>{tokens}, k, v);
  const std::vector<std::int32_t> prompt = prompt_ids();
  const std::vector<std::int32_t> ids(prompt.begin(), prompt.begin() + tokens);
  store.publish_prefix(a, ids);
  // Pages 0..3 cached from position 0: all held. A window's pages 2 and 3 alone then attach
  // through match_prefix and a drop of pages 0 and 1.
  EXPECT_EQ(store.prefix_pages(ids), (std::vector<std::uint8_t>{1, 1, 1, 1}));
  const SeqId b = store.create_sequence();
  ASSERT_TRUE(store.attach_prefix(b, ids, std::vector<std::uint64_t>{2, 3}));
  const std::vector<Position> held = store.positions(b);
  ASSERT_EQ(held.size(), 2u * kPage);
  EXPECT_EQ(held.front(), static_cast<Position>(2 * kPage));
  store.publish_prefix(b, ids);  // still allowed: the drop was of unseen positions
  // A longer prompt whose last page was never cached: nothing attaches.
  std::vector<std::int32_t> longer(ids);
  longer.insert(longer.end(), kPage, 9);
  const SeqId c = store.create_sequence();
  EXPECT_FALSE(store.attach_prefix(c, longer, std::vector<std::uint64_t>{3, 4}));
  EXPECT_EQ(store.length(c), 0u);
}

INSTANTIATE_TEST_SUITE_P(Backends, HybridPrefix, ::testing::Values("cpu-tbb", "gpu-emulated"));

}  // namespace
}  // namespace kvcache
