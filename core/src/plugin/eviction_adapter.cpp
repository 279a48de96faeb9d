#include "kvcache/eviction.hpp"

#include <cstddef>
#include <cstdio>
#include <exception>
#include <map>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "plugin/adapters.hpp"

namespace kvcache::plugin {
namespace {

// Host side of the C callbacks: answers token queries from the CacheState's TokenSource and
// collects the plan. Nothing here lets an exception reach the plugin.
struct Exchange {
  const CacheState& state;
  EvictionPlan plan;

  static int32_t tokens(void* context, uint64_t sequence, const int64_t** positions,
                        const float** scores, uint64_t* count, kvc_error* err) {
    auto& self = *static_cast<Exchange*>(context);
    try {
      if (self.state.tokens == nullptr) throw Error(Code::unsupported, "no per-token detail");
      const TokenDetail detail = self.state.tokens->tokens(sequence);
      *positions = detail.positions.data();
      *scores = detail.scores.empty() ? nullptr : detail.scores.data();
      *count = detail.positions.size();
      return KVC_OK;
    } catch (const Error& e) {
      err->code = static_cast<int32_t>(e.code());
      std::snprintf(err->message, sizeof(err->message), "%s", e.what());
    } catch (const std::exception& e) {
      err->code = KVC_INTERNAL;
      std::snprintf(err->message, sizeof(err->message), "%s", e.what());
    }
    return err->code;
  }
  template <class F>
  static int32_t collect(void* context, F&& add) {
    try {
      add(static_cast<Exchange*>(context)->plan);
      return KVC_OK;
    } catch (const std::bad_alloc&) {
      return KVC_OUT_OF_MEMORY;
    }
  }
  static int32_t free_cached(void* context, uint64_t count) {
    return collect(context, [&](EvictionPlan& p) { p.free_cached_pages += count; });
  }
  static int32_t preempt(void* context, uint64_t sequence) {
    return collect(context, [&](EvictionPlan& p) { p.preempt.push_back(sequence); });
  }
  static int32_t drop(void* context, uint64_t sequence, int64_t begin, int64_t end) {
    return collect(context, [&](EvictionPlan& p) { p.drop.push_back({sequence, {begin, end}}); });
  }
};

// A plan that names a sequence the state does not hold, a sequence twice, or positions outside
// [0, next_position) of its sequence is the policy's bug: refused whole, before anything is done.
void check_plan(const EvictionPlan& plan, const CacheState& state, const std::string& who) {
  std::map<SeqId, const SequenceState*> held;
  for (const SequenceState& s : state.sequences) held[s.id] = &s;
  const auto refuse = [&](const std::string& what) {
    throw Error(Code::internal,
                who + ": eviction plan refused whole (nothing was evicted): " + what);
  };
  std::set<SeqId> preempted;
  for (const SeqId id : plan.preempt) {
    if (!held.contains(id))
      refuse("it preempts sequence " + std::to_string(id) + ", which the cache does not hold");
    if (!preempted.insert(id).second)
      refuse("it preempts sequence " + std::to_string(id) + " twice");
  }
  for (const DroppedRange& d : plan.drop) {
    const auto it = held.find(d.sequence);
    if (it == held.end())
      refuse("it drops from sequence " + std::to_string(d.sequence) +
             ", which the cache does not hold");
    if (d.range.begin < 0 || d.range.begin >= d.range.end ||
        d.range.end > it->second->next_position)
      refuse("it drops positions [" + std::to_string(d.range.begin) + ", " +
             std::to_string(d.range.end) + ") of sequence " + std::to_string(d.sequence) +
             ", which holds positions below " + std::to_string(it->second->next_position) +
             " only");
  }
}

class HostEviction final : public EvictionPolicy {
 public:
  explicit HostEviction(std::unique_ptr<PluginInstance<kvc_eviction_table>> instance)
      : instance_(std::move(instance)) {
    uint32_t wants = 0;
    instance_->call(&kvc_eviction_table::wants_scores, &wants);
    wants_scores_ = wants != 0;
    drops_tokens_ = ask_drops_tokens();
  }

  bool wants_scores() const override { return wants_scores_; }
  std::optional<bool> drops_tokens() const override { return drops_tokens_; }

  EvictionPlan after_step(const CacheState& state) override {
    return checked(state, decide(state, [&](const kvc_cache_state* c, kvc_plan_builder* b) {
                     instance_->call(&kvc_eviction_table::after_step, c, b);
                   }));
  }
  EvictionPlan on_pressure(const CacheState& state, std::uint64_t pages_needed) override {
    return checked(state, decide(state, [&](const kvc_cache_state* c, kvc_plan_builder* b) {
                     instance_->call(&kvc_eviction_table::on_pressure, c, pages_needed, b);
                   }));
  }

 private:
  EvictionPlan checked(const CacheState& state, EvictionPlan plan) const {
    check_plan(plan, state, instance_->who());
    return plan;
  }
  template <class Call>
  static EvictionPlan decide(const CacheState& state, Call&& call) {
    std::vector<kvc_sequence_state> sequences;
    sequences.reserve(state.sequences.size());
    for (const SequenceState& s : state.sequences)
      sequences.push_back({s.id, s.tokens, s.pages, s.priority, 0, s.created_step, s.last_used_step,
                           s.next_position});
    Exchange exchange{state, {}};
    const kvc_cache_state c{sizeof(kvc_cache_state),
                            state.page_size,
                            state.step,
                            state.total_pages,
                            state.free_pages,
                            state.cached_pages,
                            sequences.size(),
                            sequences.data(),
                            &exchange,
                            &Exchange::tokens,
                            sizeof(kvc_sequence_state),
                            0};
    kvc_plan_builder builder{sizeof(kvc_plan_builder), &exchange, &Exchange::free_cached,
                             &Exchange::preempt, &Exchange::drop};
    call(&c, &builder);
    return std::move(exchange.plan);
  }

  // Not declared: an ABI 1.1 table, a null entry, or KVC_UNSUPPORTED.
  std::optional<bool> ask_drops_tokens() const {
    if (!instance_->has(&kvc_eviction_table::drops_tokens)) return std::nullopt;
    uint32_t drops = 0;
    kvc_error err{sizeof(kvc_error), KVC_OK, {}};
    const int32_t rc = instance_->table().drops_tokens(instance_->handle(), &drops, &err);
    if (rc == KVC_UNSUPPORTED) return std::nullopt;
    throw_if_failed(rc, err, instance_->who());
    return drops != 0;
  }

  std::unique_ptr<PluginInstance<kvc_eviction_table>> instance_;
  bool wants_scores_ = false;
  std::optional<bool> drops_tokens_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_eviction(std::shared_ptr<const PluginLibrary> library,
                                              const kvc_component& component,
                                              const std::string& options_json,
                                              const std::string& who) {
  return std::make_unique<HostEviction>(
      create_instance<kvc_eviction_table>(std::move(library), component, options_json, who));
}

}  // namespace kvcache::plugin
