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

class HostAttention final : public Attention {
 public:
  HostAttention(std::unique_ptr<PluginInstance<kvc_attention_table>> instance, bool rotates_queries)
      : a_(std::move(instance)),
        plans_(a_->has(&kvc_attention_table::plan) && a_->has(&kvc_attention_table::run) &&
               a_->has(&kvc_attention_table::destroy_plan)),
        rotates_queries_(rotates_queries) {}

  void decode(CacheStore& store, const AttentionRequest& request) override {
    call(&kvc_attention_table::decode, store, request);
  }
  void prefill(CacheStore& store, const AttentionRequest& request) override {
    call(&kvc_attention_table::prefill, store, request);
  }

  // A plugin of ABI 1.4 plans the step itself; an older one gets the default plan, which runs
  // its per-layer decode or prefill for each layer.
  std::unique_ptr<StepPlan> plan(CacheStore& store, const StepRequest& r) override {
    if (!plans_) return Attention::plan(store, r);
    check(r.sequences.size(), r.query_counts.size(), r.visible);
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
                             r.visible.rotations.empty() ? nullptr : &rotations};
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
    const auto* made = dynamic_cast<const HostPlan*>(&plan);
    if (made == nullptr) return Attention::run(store, plan, layer, q, out);
    if (&made->attention() != a_.get())
      throw Error(Code::invalid_argument, a_->who() + ": the plan is another attention's");
    a_->call(&kvc_attention_table::run, store_handle(store, *a_->library()), made->handle(), layer,
             &q, &out);
  }

 private:
  void check(std::size_t sequences, std::size_t query_counts, const VisibleRanges& visible) const {
    if (visible.max_ranges == 0 ||
        visible.ranges.size() < visible.counts.size() * visible.max_ranges)
      throw Error(Code::invalid_argument, a_->who() + ": visible ranges hold fewer than " +
                                              std::to_string(visible.max_ranges) + " per query");
    if (query_counts != 0 && query_counts != sequences)
      throw Error(Code::invalid_argument, a_->who() + ": one query count per sequence");
    const QueryRotations& turn = visible.rotations;
    if (turn.empty()) return;
    if (!rotates_queries_)
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

  static kvc_query_rotation rotations_of(const QueryRotations& r) {
    return {sizeof(kvc_query_rotation),
            static_cast<std::uint32_t>(r.style),
            r.rotary_dims,
            0,
            r.count(),
            r.cos_sin.data(),
            r.range_rotation.data()};
  }

  template <class Fn>
  void call(Fn kvc_attention_table::*fn, CacheStore& store, const AttentionRequest& r) {
    if (r.q == nullptr || r.out == nullptr)
      throw Error(Code::invalid_argument, a_->who() + ": q and out are required");
    check(r.sequences.size(), r.query_counts.size(), r.visible);
    const bool prefill = !r.query_counts.empty();
    const kvc_query_rotation rotations = rotations_of(r.visible.rotations);
    const kvc_attention_args args{sizeof(kvc_attention_args),
                                  r.layer,
                                  r.sequences.data(),
                                  r.sequences.size(),
                                  prefill ? r.query_counts.data() : nullptr,
                                  r.q,
                                  r.out,
                                  reinterpret_cast<const kvc_range*>(r.visible.ranges.data()),
                                  r.visible.counts.data(),
                                  r.visible.counts.size(),
                                  r.visible.max_ranges,
                                  r.scale,
                                  r.accumulate_scores ? 1u : 0u,
                                  0,
                                  r.visible.rotations.empty() ? nullptr : &rotations};
    void* handle = store_handle(store, *a_->library());
    a_->call(fn, handle, &args);
  }

  std::unique_ptr<PluginInstance<kvc_attention_table>> a_;
  bool plans_;  // the table has plan, run and destroy_plan
  bool rotates_queries_;
};

}  // namespace

std::unique_ptr<Attention> make_attention(std::shared_ptr<const PluginLibrary> library,
                                          const kvc_attention_table* table, void* attention,
                                          const std::string& who, bool rotates_queries) {
  return std::make_unique<HostAttention>(adopt(std::move(library), table, attention, who),
                                         rotates_queries);
}

}  // namespace kvcache::plugin
