// Calls, status codes and exceptions round-trip through the SDK's thunks and the host adapters.
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvcache/host_tensor.hpp"
#include "kvcache/registry.hpp"
#include "test_plugins.hpp"

namespace kvcache {
namespace {

using ::testing::HasSubstr;

class PluginRoundTrip : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { registry_ = Registry::load(testing::test_plugin_settings()); }
  static void TearDownTestSuite() { registry_.reset(); }
  static std::shared_ptr<const Registry> registry_;
};
std::shared_ptr<const Registry> PluginRoundTrip::registry_;

// Runs `f`, expects an Error with this code whose message contains `text`.
template <class F>
void expect_error(F&& f, Code code, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing: " << text;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(text));
  }
}

TEST_F(PluginRoundTrip, ComponentInfoCarriesVersionsFileAndCapabilities) {
  const ComponentInfo* q = registry_->find(ComponentKind::quantizer, "test-quantizer");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->version, "1.0.0");
  EXPECT_EQ(q->plugin, "test-roundtrip");
  EXPECT_EQ(q->plugin_version, "0.0.1");
  EXPECT_EQ(q->file.filename(), "kvcache-test-roundtrip.so");
  EXPECT_EQ(q->capabilities.formats, std::vector<std::string>{"test-fp32"});
  EXPECT_EQ(q->capabilities.head_dims, (std::vector<std::uint32_t>{64, 128}));
  EXPECT_EQ(q->capabilities.page_sizes, std::vector<std::uint32_t>{16});
  EXPECT_EQ(q->capabilities.device_kind, "cpu");
  EXPECT_TRUE(q->available);
}

TEST_F(PluginRoundTrip, MaskRangesCrossTheBoundary) {
  const auto mask = registry_->create_mask("test-mask");
  const MaskDescription d = mask->describe();
  EXPECT_EQ(d.kind, MaskKind::custom);
  EXPECT_EQ(d.max_ranges, 2u);
  const std::vector<Position> queries{0, 1, 7};
  std::vector<PositionRange> ranges(queries.size() * 2);
  std::vector<std::uint32_t> counts(queries.size());
  mask->visible(queries, ranges, counts);
  EXPECT_EQ(counts, (std::vector<std::uint32_t>{1, 1, 2}));
  EXPECT_EQ(ranges[0], (PositionRange{0, 1}));
  EXPECT_EQ(ranges[2], (PositionRange{0, 2}));
  EXPECT_EQ(ranges[4], (PositionRange{0, 2}));
  EXPECT_EQ(ranges[5], (PositionRange{7, 8}));
}

TEST_F(PluginRoundTrip, KvcacheErrorKeepsItsCodeAndMessage) {
  const auto mask = registry_->create_mask("test-mask", {{"fail", "error"}});
  const std::vector<Position> q{3};
  std::vector<PositionRange> r(2);
  std::vector<std::uint32_t> c(1);
  expect_error([&] { mask->visible(q, r, c); }, Code::unsupported,
               "mask 'test-mask' (kvcache-test-roundtrip.so): test mask refuses on purpose");
}

TEST_F(PluginRoundTrip, StdExceptionBecomesInternalWithItsText) {
  const auto mask = registry_->create_mask("test-mask", {{"fail", "std"}});
  const std::vector<Position> q{3};
  std::vector<PositionRange> r(2);
  std::vector<std::uint32_t> c(1);
  expect_error([&] { mask->visible(q, r, c); }, Code::internal,
               "a std::runtime_error from the plugin");
}

TEST_F(PluginRoundTrip, ForeignExceptionBecomesInternal) {
  const auto mask = registry_->create_mask("test-mask", {{"fail", "unknown"}});
  const std::vector<Position> q{3};
  std::vector<PositionRange> r(2);
  std::vector<std::uint32_t> c(1);
  expect_error([&] { mask->visible(q, r, c); }, Code::internal, "unknown exception");
}

TEST_F(PluginRoundTrip, BadOptionsAreRejectedAtCreationWithSuggestion) {
  expect_error(
      [&] {
        registry_->create_mask("test-mask", {{"fial", "std"}});
      },
      Code::invalid_argument, "unknown option 'fial' (did you mean 'fail'?)");
  expect_error(
      [&] {
        registry_->create_eviction("test-eviction", {{"min_priority", "high"}});
      },
      Code::invalid_argument, "option 'min_priority': expected an integer in range, got \"high\"");
}

TEST_F(PluginRoundTrip, UnknownComponentSuggestsTheNearest) {
  expect_error([&] { registry_->create_mask("test-msk"); }, Code::not_found,
               "unknown mask 'test-msk' (did you mean 'test-mask'?)");
}

TEST_F(PluginRoundTrip, QuantizerEncodesAndDecodesDLTensors) {
  const auto q = registry_->create_quantizer("test-quantizer", {{"scale", 4.0}});
  const TileLayout f = q->describe(4, 16);
  EXPECT_EQ(f.code_bits, 32u);
  EXPECT_EQ(f.tile_bytes, 4u * 16u * 4u);
  std::vector<float> tile(4 * 16, 0.0f);
  std::vector<float> values{1, 2, 3, 4, 5, 6, 7, 8};
  int64_t shape[2] = {2, 4};
  DLTensor src = host_tensor(values.data(), shape, 2);
  q->encode(src, 3, 16, tile.data());
  EXPECT_EQ(tile[3 * 4], 4.0f);
  EXPECT_EQ(tile[4 * 4 + 3], 32.0f);
  std::vector<float> back(8);
  DLTensor dst = host_tensor(back.data(), shape, 2);
  q->decode(tile.data(), 3, 16, dst);
  EXPECT_EQ(back, values);
  DLTensor wrong = src;
  wrong.dtype = {kDLFloat, 16, 1};
  expect_error([&] { q->encode(wrong, 0, 16, tile.data()); }, Code::invalid_argument,
               "2-d float32");
}

class ScoredTokens final : public TokenSource {
 public:
  TokenDetail tokens(SeqId) const override { return {positions, scores}; }
  std::vector<Position> positions{4, 5, 9};
  std::vector<float> scores{0.5f, 0.25f, 0.25f};
};

TEST_F(PluginRoundTrip, EvictionPlansAndTokenDetailCrossTheBoundary) {
  const auto policy = registry_->create_eviction("test-eviction", {{"min_priority", 20}});
  EXPECT_TRUE(policy->wants_scores());
  // It does not say whether it drops tokens (the SDK's default): the host reads "not declared".
  EXPECT_EQ(policy->drops_tokens(), std::nullopt);
  const std::vector<SequenceState> sequences{{7, 3, 1, 10, 5, 9, 10}, {8, 3, 1, 90, 2, 9, 10}};
  ScoredTokens tokens;
  const CacheState state{16, 10, 100, 0, 3, sequences, &tokens};
  const EvictionPlan proactive = policy->after_step(state);
  EXPECT_EQ(proactive.preempt, std::vector<SeqId>{7});
  const EvictionPlan pressure = policy->on_pressure(state, 5);
  EXPECT_EQ(pressure.free_cached_pages, 3u);
  ASSERT_EQ(pressure.drop.size(), 1u);
  EXPECT_EQ(pressure.drop[0], (DroppedRange{8, {4, 5}}));  // sequence 8 is the oldest
}

TEST_F(PluginRoundTrip, HostErrorsInCallbacksReachThePolicyAndComeBack) {
  const auto policy = registry_->create_eviction("test-eviction");
  const std::vector<SequenceState> sequences{{1, 3, 1, 50, 0, 0, 3}};
  const CacheState state{16, 1, 10, 0, 0, sequences, nullptr};  // no per-token detail
  expect_error([&] { policy->on_pressure(state, 1); }, Code::unsupported, "no per-token detail");
}

// A backend built against ABI 1.0 (tables only grow at the end): a 1.1 host loads it, uses what
// 1.0 had, and treats what 1.1 added as absent instead of reading past its table.
TEST_F(PluginRoundTrip, BackendFromAnOlderMinorVersionStillWorks) {
  const auto backend = registry_->create_backend("test-abi-1-0");
  ASSERT_EQ(backend->devices().size(), 1u);
  EXPECT_EQ(backend->devices()[0].name, "ABI 1.0 device");
  EXPECT_FALSE(backend->memory_bandwidth_gbps(1 << 20).has_value());
  expect_error([&] { backend->create_store(StoreSpec{}); }, Code::unsupported, "makes no stores");
}

// A backend built against ABI 1.2: its stores come from create_store (the host lends no codecs
// to a table without create_store_with), are described by the formats kvc_store_info embeds (its
// store table has no format entry), and its capabilities read as running only its own formats.
TEST_F(PluginRoundTrip, BackendFromABI12MakesStoresTheOldWay) {
  const ComponentInfo* info = registry_->find(ComponentKind::backend, "test-abi-1-2");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->capabilities.formats, (std::vector<std::string>{"fp16", "int8-per-token"}));
  EXPECT_FALSE(info->capabilities.foreign_formats);
  EXPECT_TRUE(info->capabilities.numerics.empty());
  EXPECT_THAT(format_refusal(*info, "nf4").value_or(""),
              HasSubstr("runs only its own formats (fp16, int8-per-token)"));
  const auto backend = registry_->create_backend("test-abi-1-2");
  const auto store = backend->create_store(StoreSpec{});
  const StoreInfo i = store->info();
  EXPECT_EQ(i.page_size, 16u);
  EXPECT_EQ(i.k_format.code_bits, 16u);
  EXPECT_EQ(i.v_format.code_bits, 8u);
  EXPECT_EQ(i.v_format.slot_meta_bytes, 4u);
  EXPECT_EQ(i.v_format.granularity, Granularity::token_head);
}

// An eviction policy built against ABI 1.1 loads and plans; whether it drops tokens (1.2) reads
// as not declared.
TEST_F(PluginRoundTrip, EvictionFromAnOlderMinorVersionStillWorks) {
  const auto policy = registry_->create_eviction("test-abi-1-1");
  EXPECT_FALSE(policy->wants_scores());
  EXPECT_EQ(policy->drops_tokens(), std::nullopt);
  const std::vector<SequenceState> sequences{{7, 3, 1, 10, 5, 9, 10}};
  EXPECT_TRUE(policy->on_pressure({16, 10, 100, 0, 0, sequences, nullptr}, 1).empty());
}

TEST_F(PluginRoundTrip, BackendDevicesAndAvailability) {
  const auto backend = registry_->create_backend("test-backend", {{"devices", 3}});
  const std::vector<DeviceInfo> devices = backend->devices();
  ASSERT_EQ(devices.size(), 3u);
  EXPECT_EQ(devices[1].name, "test device 1");
  EXPECT_EQ(devices[0].memory_bytes, std::uint64_t{1} << 30);
  EXPECT_TRUE(devices[0].available);
  EXPECT_FALSE(devices[2].available);
  EXPECT_EQ(devices[2].reason, "busy");
  // A backend that keeps no memory of its own leaves the bandwidth to its caller (ABI 1.1).
  EXPECT_FALSE(backend->memory_bandwidth_gbps(1 << 20).has_value());

  const ComponentInfo* offline = registry_->find(ComponentKind::backend, "test-offline");
  ASSERT_NE(offline, nullptr);
  EXPECT_FALSE(offline->available);
  EXPECT_EQ(offline->unavailable_reason, "no test accelerator attached");
  expect_error([&] { registry_->create_backend("test-offline"); }, Code::unavailable,
               "backend 'test-offline' is unavailable: no test accelerator attached");
}

}  // namespace
}  // namespace kvcache
