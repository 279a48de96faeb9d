// Components that fail on purpose, for the fault-injection tests, each with the same options:
//   fail   the call that fails ("none" by default)
//   at     which call of it fails first, counting from 1 (default 1)
//   times  how many calls in a row fail from there (default 1; 0: every one)
//   how    error (a kvcache::Error, code unavailable), std (std::runtime_error), unknown (an int),
//          oom (std::bad_alloc), or a kind of garbage the call returns instead of failing
// - backend test-faulty: the scalar example's store and attention (examples/scalar-backend);
//   fail: reserve, append, drop, unreserve, truncate, plan, run (a step's attention), decode or
//   prefill (the per-layer calls); garbage: drop returns a wrong count.
// - mask test-faulty-mask: causal; fail: visible; garbage: too-many (more ranges than its
//   max_ranges), reversed, overlap.
// - eviction test-faulty-eviction: under pressure preempts the oldest sequence; fail: on_pressure
//   or after_step; garbage (added to that plan): unknown-sequence, unknown-position, twice; or
//   drop-too, a sound plan that also drops the first token of every other sequence.
#include <memory>
#include <new>
#include <stdexcept>
#include <string>

#include "host_store.hpp"
#include "kvcache/formats.hpp"
#include "kvcache/forwarding_store.hpp"
#include "kvcache/sdk/plugin.hpp"
#include "scalar_attention.hpp"
#include "scalar_backend.hpp"

namespace {

using namespace kvcache;

// Which call fails, when and how; shared by the backend's stores and attention.
class Fault {
 public:
  explicit Fault(const sdk::Options& options)
      : call_(options.get<std::string>("fail", "none")),
        how_(options.get<std::string>("how", "error")),
        at_(options.get<int>("at", 1)),
        times_(options.get<int>("times", 1)) {
    options.only({"fail", "at", "times", "how"});
  }

  // Counts a call of `call`; throws when it is one of those that fail that way. Returns the kind
  // of garbage the call should return instead, or "" to behave.
  bool targets(const char* call) const { return call_ == call; }
  std::string strike(const char* call) {
    if (call_ != call) return "";
    const int n = ++count_;
    if (n < at_ || (times_ > 0 && n >= at_ + times_)) return "";
    if (how_ == "error") throw Error(Code::unavailable, std::string("injected failure in ") + call);
    if (how_ == "std") throw std::runtime_error(std::string("injected failure in ") + call);
    if (how_ == "unknown") throw 42;
    if (how_ == "oom") throw std::bad_alloc();
    return how_;
  }

 private:
  std::string call_, how_;
  int at_, times_, count_ = 0;
};

// The scalar store, every call forwarded; the faulty ones first ask the Fault.
class FaultyStore final : public ForwardingStore {
 public:
  FaultyStore(std::unique_ptr<CacheStore> inner, std::shared_ptr<Fault> fault)
      : ForwardingStore(std::move(inner)), fault_(std::move(fault)) {}

  void reserve(std::span<const SeqId> ids, std::span<const std::uint32_t> tokens) override {
    fault_->strike("reserve");
    inner_->reserve(ids, tokens);
  }
  void append(std::uint32_t layer, std::span<const SeqId> ids,
              std::span<const std::uint32_t> counts, const DLTensor& k,
              const DLTensor& v) override {
    fault_->strike("append");
    inner_->append(layer, ids, counts, k, v);
  }
  std::uint64_t drop(SeqId id, std::span<const PositionRange> ranges) override {
    const bool garbage = !fault_->strike("drop").empty();
    const std::uint64_t dropped = inner_->drop(id, ranges);
    return garbage ? dropped + 7 : dropped;
  }
  void unreserve(SeqId id, std::uint64_t tokens) override {
    fault_->strike("unreserve");
    inner_->unreserve(id, tokens);
  }
  void truncate(SeqId id, std::uint64_t tokens) override {
    fault_->strike("truncate");
    inner_->truncate(id, tokens);
  }

 private:
  std::shared_ptr<Fault> fault_;
};

// The scalar attention over the FaultyStore's inner store.
class FaultyAttention final : public Attention {
 public:
  explicit FaultyAttention(std::shared_ptr<Fault> fault) : fault_(std::move(fault)) {}

  std::unique_ptr<StepPlan> plan(CacheStore& store, const StepRequest& request) override {
    fault_->strike("plan");
    return inner_.plan(unwrap(store), request);
  }
  void run(CacheStore& store, const StepPlan& plan, std::uint32_t layer, const DLTensor& q,
           DLTensor& out) override {
    fault_->strike("run");
    inner_.run(unwrap(store), plan, layer, q, out);
  }

 private:
  static CacheStore& unwrap(CacheStore& store) { return static_cast<FaultyStore&>(store).inner(); }
  scalar::ScalarAttention inner_;
  std::shared_ptr<Fault> fault_;
};

class FaultyBackend final : public Backend {
 public:
  explicit FaultyBackend(const sdk::Options& options)
      : fault_(std::make_shared<Fault>(options)), inner_(sdk::Options()) {}
  std::vector<DeviceInfo> devices() const override { return inner_.devices(); }
  std::unique_ptr<CacheStore> create_store(const StoreSpec& spec) override {
    return std::make_unique<FaultyStore>(inner_.create_store(spec), fault_);
  }
  std::unique_ptr<Attention> create_attention() override {
    return std::make_unique<FaultyAttention>(fault_);
  }

 private:
  std::shared_ptr<Fault> fault_;
  scalar::ScalarBackend inner_;
};

// Causal: each query sees [0, q + 1).
class FaultyMask final : public AttentionMask {
 public:
  explicit FaultyMask(const sdk::Options& options) : fault_(options) {}
  // Failing in query_positions, it places queries within the cache (each at its own position,
  // unless garbage is asked for).
  MaskDescription describe() const override {
    return {MaskKind::custom, 2, 0, 0, 0, fault_.targets("query_positions")};
  }
  void query_positions(std::span<const Position> queries, std::span<const PositionRange> ranges,
                       std::span<const std::uint32_t> counts,
                       std::span<Position> positions) const override {
    const std::string garbage = fault_.strike("query_positions");
    AttentionMask::query_positions(queries, ranges, counts, positions);
    if (garbage == "below-zero") positions[0] = -1;
  }
  void visible(std::span<const Position> queries, std::span<PositionRange> ranges,
               std::span<std::uint32_t> counts) const override {
    const std::string garbage = fault_.strike("visible");
    for (std::size_t i = 0; i < queries.size(); ++i) {
      const Position q = queries[i];
      ranges[i * 2] = {0, q + 1};
      counts[i] = 1;
      if (garbage == "too-many") counts[i] = 3;
      if (garbage == "reversed") ranges[i * 2] = {q + 1, 0};
      if (garbage == "overlap") ranges[i * 2 + 1] = {0, 1}, counts[i] = 2;
    }
  }

 private:
  mutable Fault fault_;
};

// Under pressure, the oldest sequence goes; after a step, nothing (unless garbage is asked for).
class FaultyEviction final : public EvictionPolicy {
 public:
  explicit FaultyEviction(const sdk::Options& options) : fault_(options) {}
  bool wants_scores() const override { return false; }
  EvictionPlan after_step(const CacheState& state) override {
    EvictionPlan plan;
    add_garbage(plan, state, fault_.strike("after_step"));
    return plan;
  }
  EvictionPlan on_pressure(const CacheState& state, std::uint64_t) override {
    EvictionPlan plan;
    if (const SequenceState* old = oldest(state)) plan.preempt.push_back(old->id);
    add_garbage(plan, state, fault_.strike("on_pressure"));
    return plan;
  }

 private:
  static const SequenceState* oldest(const CacheState& state) {
    const SequenceState* found = nullptr;
    for (const SequenceState& s : state.sequences)
      if (found == nullptr || s.created_step < found->created_step) found = &s;
    return found;
  }
  // What a buggy policy might add to a sound plan; the whole plan must then be refused.
  static void add_garbage(EvictionPlan& plan, const CacheState& state, const std::string& kind) {
    const SequenceState* old = oldest(state);
    if (kind.empty() || old == nullptr) return;
    if (plan.preempt.empty()) plan.preempt.push_back(old->id);
    if (kind == "unknown-sequence") plan.preempt.push_back(old->id + 1000000);
    if (kind == "unknown-position")
      plan.drop.push_back({old->id, {old->next_position, old->next_position + 5}});
    if (kind == "twice") plan.preempt.push_back(old->id);
    if (kind == "drop-too")
      for (const SequenceState& s : state.sequences)
        if (s.id != old->id) plan.drop.push_back({s.id, {0, 1}});
  }

  Fault fault_;
};

}  // namespace

KVCACHE_PLUGIN("test-faulty", "0.0.1",
               sdk::component<FaultyBackend>("test-faulty", "0.0.1",
                                             {format_names(), {}, {}, "cpu", true}),
               sdk::component<FaultyMask>("test-faulty-mask", "0.0.1"),
               sdk::component<FaultyEviction>("test-faulty-eviction", "0.0.1"))
