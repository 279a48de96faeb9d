#include <vector>

#include "kvcache/attention.hpp"

#include "plugin/adapters.hpp"

namespace kvcache::plugin {
namespace {

// A plan the plugin made (ABI 1.4), freed by it.
class HostPlan final : public StepPlan {
 public:
  HostPlan(const PluginInstance<kvc_attention_table>& attention, void* handle)
      : attention_(attention), handle_(handle) {}
  ~HostPlan() override { attention_.table().destroy_plan(attention_.handle(), handle_); }
  HostPlan(const HostPlan&) = delete;
  HostPlan& operator=(const HostPlan&) = delete;
  const PluginInstance<kvc_attention_table>& attention() const { return attention_; }
  void* handle() const { return handle_; }

 private:
  const PluginInstance<kvc_attention_table>& attention_;
  void* handle_;
};

// A query's rotations as the C ABI passes them (ABI 1.6), viewing `r`'s arrays.
kvc_query_rotation rotations_of(const QueryRotations& r) {
  return {sizeof(kvc_query_rotation),
          static_cast<std::uint32_t>(r.style),
          r.rotary_dims,
          0,
          r.count(),
          r.cos_sin.data(),
          r.range_rotation.data()};
}

// What a plugin older than ABI 1.4 (per-layer decode and prefill, no plan) is given for a step:
// the request, copied, which each layer's run passes to its decode or prefill.
class PerLayerPlan final : public StepPlan {
 public:
  explicit PerLayerPlan(const StepRequest& r)
      : sequences_(r.sequences.begin(), r.sequences.end()),
        query_counts_(r.query_counts.begin(), r.query_counts.end()),
        ranges_(r.visible.ranges.begin(), r.visible.ranges.end()),
        range_counts_(r.visible.counts.begin(), r.visible.counts.end()),
        max_ranges_(r.visible.max_ranges),
        cos_sin_(r.visible.rotations.cos_sin.begin(), r.visible.rotations.cos_sin.end()),
        range_rotation_(r.visible.rotations.range_rotation.begin(),
                        r.visible.rotations.range_rotation.end()),
        rotation_(rotations_of({r.visible.rotations.style, r.visible.rotations.rotary_dims,
                                cos_sin_, range_rotation_})),
        scale_(r.scale),
        accumulate_scores_(r.accumulate_scores) {}
  PerLayerPlan(const PerLayerPlan&) = delete;  // rotation_ points into its own members
  PerLayerPlan& operator=(const PerLayerPlan&) = delete;

  kvc_attention_args args(std::uint32_t layer, const DLTensor& q, DLTensor& out) const {
    return {sizeof(kvc_attention_args),
            layer,
            sequences_.data(),
            sequences_.size(),
            query_counts_.empty() ? nullptr : query_counts_.data(),
            &q,
            &out,
            reinterpret_cast<const kvc_range*>(ranges_.data()),
            range_counts_.data(),
            range_counts_.size(),
            max_ranges_,
            scale_,
            accumulate_scores_ ? 1u : 0u,
            0,
            range_rotation_.empty() ? nullptr : &rotation_};
  }
  bool prefill() const { return !query_counts_.empty(); }

 private:
  std::vector<SeqId> sequences_;
  std::vector<std::uint32_t> query_counts_;
  std::vector<PositionRange> ranges_;
  std::vector<std::uint32_t> range_counts_;
  std::uint32_t max_ranges_;
  std::vector<float> cos_sin_;
  std::vector<std::uint32_t> range_rotation_;
  kvc_query_rotation rotation_;
  float scale_;
  bool accumulate_scores_;
};

class HostAttention final : public Attention {
 public:
  HostAttention(std::unique_ptr<PluginInstance<kvc_attention_table>> instance,
                AttentionTraits traits)
      : a_(std::move(instance)),
        plans_(a_->has(&kvc_attention_table::plan) && a_->has(&kvc_attention_table::run) &&
               a_->has(&kvc_attention_table::destroy_plan)),
        traits_(traits) {}

  // A plugin of ABI 1.4 plans the step itself; an older one gets a copy of the request, and each
  // layer runs its per-layer decode or prefill.
  std::unique_ptr<StepPlan> plan(CacheStore& store, const StepRequest& r) override {
    check(r);
    if (!plans_) return std::make_unique<PerLayerPlan>(r);
    const kvc_query_rotation rotations = rotations_of(r.visible.rotations);
    const kvc_step_args args{sizeof(kvc_step_args),
                             r.accumulate_scores ? 1u : 0u,
                             r.sequences.data(),
                             r.sequences.size(),
                             r.query_counts.empty() ? nullptr : r.query_counts.data(),
                             reinterpret_cast<const kvc_range*>(r.visible.ranges.data()),
                             r.visible.counts.data(),
                             r.visible.counts.size(),
                             r.visible.max_ranges,
                             r.scale,
                             r.visible.rotations.empty() ? nullptr : &rotations,
                             r.stream ? 1u : 0u,
                             0,
                             r.stream ? r.stream->handle : nullptr};
    void* handle = nullptr;
    a_->call(&kvc_attention_table::plan, store_handle(store, *a_->library()), &args, &handle);
    if (handle == nullptr) throw Error(Code::internal, a_->who() + ": plan made no plan");
    try {
      return std::make_unique<HostPlan>(*a_, handle);
    } catch (...) {  // out of memory: the plugin's plan is given back, not leaked
      a_->table().destroy_plan(a_->handle(), handle);
      throw;
    }
  }

  void run(CacheStore& store, const StepPlan& plan, std::uint32_t layer, const DLTensor& q,
           DLTensor& out) override {
    void* kv = store_handle(store, *a_->library());
    if (!plans_) {
      const auto* copy = dynamic_cast<const PerLayerPlan*>(&plan);
      if (copy == nullptr)
        throw Error(Code::invalid_argument, a_->who() + ": the plan is another attention's");
      const kvc_attention_args args = copy->args(layer, q, out);
      a_->call(copy->prefill() ? &kvc_attention_table::prefill : &kvc_attention_table::decode, kv,
               &args);
      return;
    }
    const auto* made = dynamic_cast<const HostPlan*>(&plan);
    if (made == nullptr || &made->attention() != a_.get())
      throw Error(Code::invalid_argument, a_->who() + ": the plan is another attention's");
    a_->call(&kvc_attention_table::run, kv, made->handle(), layer, &q, &out);
  }

  void finish(CacheStore& store, const StepPlan& plan, void* event) override {
    const auto* made = dynamic_cast<const HostPlan*>(&plan);
    // Plans on an engine stream are made only by a plugin that has finish (see check).
    if (made == nullptr || !a_->has(&kvc_attention_table::finish)) return;
    a_->call(&kvc_attention_table::finish, store_handle(store, *a_->library()), made->handle(),
             event);
  }

 private:
  void check(const StepRequest& r) const {
    const VisibleRanges& visible = r.visible;
    const std::size_t query_counts = r.query_counts.size(), sequences = r.sequences.size();
    if (r.stream && !(traits_.engine_streams && plans_ && a_->has(&kvc_attention_table::finish)))
      throw Error(Code::unsupported,
                  a_->who() +
                      " takes no engine stream (it does not declare engine_streams, ABI 1.10): "
                      "its work is done when each call returns, so run the step without one");
    if (visible.max_ranges == 0 ||
        visible.ranges.size() < visible.counts.size() * visible.max_ranges)
      throw Error(Code::invalid_argument, a_->who() + ": visible ranges hold fewer than " +
                                              std::to_string(visible.max_ranges) + " per query");
    if (query_counts != 0 && query_counts != sequences)
      throw Error(Code::invalid_argument, a_->who() + ": one query count per sequence");
    const QueryRotations& turn = visible.rotations;
    if (turn.empty()) return;
    if (!traits_.rotates_queries)
      throw Error(Code::unsupported,
                  a_->who() +
                      " does not turn queries per range (ABI 1.6 query_rotation): it "
                      "cannot attend at positions within the cache");
    if (turn.range_rotation.size() != visible.ranges.size() || turn.rotary_dims == 0 ||
        turn.rotary_dims % 2 != 0 || turn.cos_sin.size() % turn.rotary_dims != 0)
      throw Error(Code::invalid_argument,
                  a_->who() +
                      ": query rotations: one entry per range and whole rotations of an "
                      "even rotary_dims expected");
  }

  std::unique_ptr<PluginInstance<kvc_attention_table>> a_;
  bool plans_;  // the table has plan, run and destroy_plan
  AttentionTraits traits_;
};

}  // namespace

std::unique_ptr<Attention> make_attention(std::shared_ptr<const PluginLibrary> library,
                                          const kvc_attention_table* table, void* attention,
                                          const std::string& who, AttentionTraits traits) {
  return std::make_unique<HostAttention>(adopt(std::move(library), table, attention, who), traits);
}

}  // namespace kvcache::plugin
