// A working plugin with one component of every kind, built with the SDK. Its behaviour is chosen
// by options so that tests can make each call fail in each way and see the status arrive intact.
#include <cstring>
#include <stdexcept>
#include <string>

#include "kvcache/sdk/plugin.hpp"

namespace {

using namespace kvcache;

// Throws what `how` names: a kvcache::Error keeps its code, anything else becomes `internal`.
void fail(const std::string& how) {
  if (how == "error") throw Error(Code::unsupported, "test mask refuses on purpose");
  if (how == "std") throw std::runtime_error("a std::runtime_error from the plugin");
  if (how == "unknown") throw 42;
}

// Sees the query itself and every even earlier position, as up to two ranges: [0, 2) ∪ [q, q+1).
class TestMask final : public AttentionMask {
 public:
  explicit TestMask(const sdk::Options& options) {
    options.only({"fail"});
    fail_ = options.get<std::string>("fail", "none");
  }
  MaskDescription describe() const override { return {MaskKind::custom, 2, 0, 0, 0}; }
  void visible(std::span<const Position> queries, std::span<PositionRange> ranges,
               std::span<std::uint32_t> counts) const override {
    fail(fail_);
    for (std::size_t i = 0; i < queries.size(); ++i) {
      const Position q = queries[i];
      std::uint32_t n = 0;
      if (q >= 2) ranges[i * 2 + n++] = {0, 2};
      ranges[i * 2 + n++] = {q < 2 ? 0 : q, q + 1};
      counts[i] = n;
    }
  }

 private:
  std::string fail_;
};

// Stores float32 values multiplied by `scale`; only float32 input is accepted.
class TestQuantizer final : public Quantizer {
 public:
  explicit TestQuantizer(const sdk::Options& options) : scale_(options.get<double>("scale", 2.0)) {
    options.only({"scale"});
  }
  TileLayout describe(std::uint32_t head_dim, std::uint32_t page_size) const override {
    const std::uint64_t bytes = std::uint64_t{head_dim} * page_size * sizeof(float);
    return {32, Granularity::none, 0, true, {0, 0, 0}, bytes, bytes};
  }
  void encode(const DLTensor& src, std::uint32_t first_slot, std::uint32_t,
              void* tile) const override {
    check(src);
    const auto n = src.shape[0] * src.shape[1];
    float* out = static_cast<float*>(tile) + first_slot * src.shape[1];
    for (int64_t i = 0; i < n; ++i)
      out[i] = static_cast<float>(static_cast<const float*>(src.data)[i] * scale_);
  }
  void decode(const void* tile, std::uint32_t first_slot, std::uint32_t,
              DLTensor& dst) const override {
    check(dst);
    const auto n = dst.shape[0] * dst.shape[1];
    const float* in = static_cast<const float*>(tile) + first_slot * dst.shape[1];
    for (int64_t i = 0; i < n; ++i)
      static_cast<float*>(dst.data)[i] = static_cast<float>(in[i] / scale_);
  }

 private:
  static void check(const DLTensor& t) {
    if (t.ndim != 2 || t.dtype.code != kDLFloat || t.dtype.bits != 32)
      throw Error(Code::invalid_argument, "test quantizer takes 2-d float32 tensors");
  }
  double scale_;
};

// Proactively preempts sequences below `min_priority`; under pressure frees cached pages and
// drops the first token of the oldest sequence (found through the per-token callback).
class TestEviction final : public EvictionPolicy {
 public:
  explicit TestEviction(const sdk::Options& options)
      : min_priority_(options.get<int>("min_priority", 10)) {
    options.only({"min_priority"});
  }
  bool wants_scores() const override { return true; }
  EvictionPlan after_step(const CacheState& state) override {
    EvictionPlan plan;
    for (const SequenceState& s : state.sequences)
      if (s.priority < min_priority_) plan.preempt.push_back(s.id);
    return plan;
  }
  EvictionPlan on_pressure(const CacheState& state, std::uint64_t pages_needed) override {
    EvictionPlan plan;
    plan.free_cached_pages = std::min(pages_needed, state.cached_pages);
    const SequenceState* oldest = nullptr;
    for (const SequenceState& s : state.sequences)
      if (oldest == nullptr || s.created_step < oldest->created_step) oldest = &s;
    if (oldest != nullptr) {
      const TokenDetail detail = state.tokens->tokens(oldest->id);
      if (detail.positions.empty() || detail.scores.size() != detail.positions.size())
        throw Error(Code::invalid_argument, "expected positions with scores");
      const Position first = detail.positions.front();
      plan.drop.push_back({oldest->id, {first, first + 1}});
    }
    return plan;
  }

 private:
  int min_priority_;
};

// A backend with `devices` fake devices.
class TestBackend final : public Backend {
 public:
  explicit TestBackend(const sdk::Options& options) : count_(options.get<int>("devices", 2)) {
    options.only({"devices"});
  }
  std::vector<DeviceInfo> devices() const override {
    std::vector<DeviceInfo> d;
    for (int i = 0; i < count_; ++i)
      d.push_back({static_cast<std::uint32_t>(i), "test device " + std::to_string(i),
                   std::uint64_t{1} << 30, i == 0, i == 0 ? "" : "busy"});
    return d;
  }
  std::unique_ptr<CacheStore> create_store(const StoreSpec& spec) override {
    throw Error(Code::unsupported, "test backend keeps no cache (page_size " +
                                       std::to_string(spec.page_size) + " asked)");
  }
  std::unique_ptr<Attention> create_attention() override {
    throw Error(Code::unsupported, "test backend has no attention");
  }

 private:
  int count_;
};

// A backend that loads but cannot run on this host, like CUDA without a GPU.
class OfflineBackend final : public Backend {
 public:
  explicit OfflineBackend(const sdk::Options&) {}
  static sdk::Availability availability() { return {false, "no test accelerator attached"}; }
  std::vector<DeviceInfo> devices() const override { return {}; }
  std::unique_ptr<CacheStore> create_store(const StoreSpec&) override {
    throw Error(Code::unavailable, "no test accelerator attached");
  }
  std::unique_ptr<Attention> create_attention() override {
    throw Error(Code::unavailable, "no test accelerator attached");
  }
};

}  // namespace

KVCACHE_PLUGIN("test-roundtrip", "0.0.1", sdk::component<TestMask>("test-mask", "1.2.3"),
               sdk::component<TestQuantizer>("test-quantizer", "1.0.0",
                                             {{"test-fp32"}, {64, 128}, {16}, "cpu"}),
               sdk::component<TestEviction>("test-eviction", "1.0.0"),
               sdk::component<TestBackend>("test-backend", "1.0.0", {{}, {}, {}, "cpu"}),
               sdk::component<OfflineBackend>("test-offline", "1.0.0", {{}, {}, {}, "test"}))
