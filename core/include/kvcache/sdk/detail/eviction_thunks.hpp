// The C table of an EvictionPolicy component, and the host's cache state seen through the
// policy's interfaces.
#pragma once

#include <cstdint>
#include <vector>

#include "kvcache/eviction.hpp"
#include "kvcache/plugin_abi.h"
#include "kvcache/sdk/detail/guard.hpp"
#include "kvcache/sdk/detail/instance.hpp"

namespace kvcache::sdk::detail {

// The host's per-token callback seen as a TokenSource.
class HostTokens final : public TokenSource {
 public:
  explicit HostTokens(const kvc_cache_state& state) : state_(state) {}
  TokenDetail tokens(SeqId sequence) const override {
    const int64_t* positions = nullptr;
    const float* scores = nullptr;
    uint64_t count = 0;
    kvc_error err{sizeof(kvc_error), 0, {}};
    if (state_.tokens(state_.context, sequence, &positions, &scores, &count, &err) != KVC_OK)
      throw Error(static_cast<Code>(err.code), err.message);
    return {std::span<const Position>(positions, count),
            scores ? std::span<const float>(scores, count) : std::span<const float>()};
  }

 private:
  const kvc_cache_state& state_;
};

inline void send_plan(const EvictionPlan& plan, kvc_plan_builder* builder) {
  const auto check = [](int32_t rc, const char* what) {
    if (rc != KVC_OK) throw Error(static_cast<Code>(rc), std::string("host refused ") + what);
  };
  if (plan.free_cached_pages > 0)
    check(builder->free_cached_pages(builder->context, plan.free_cached_pages),
          "free_cached_pages");
  for (SeqId s : plan.preempt) check(builder->preempt(builder->context, s), "preempt");
  for (const DroppedRange& d : plan.drop)
    check(builder->drop(builder->context, d.sequence, d.range.begin, d.range.end), "drop");
}

template <class T>
struct EvictionThunks {
  template <class Decide>
  static int32_t decide(const kvc_cache_state* state, kvc_plan_builder* builder, kvc_error* err,
                        Decide&& policy_call) noexcept {
    return guard(err, [&] {
      // Entries are sequence_size bytes apart (ABI 1.3); a 1.2 host's are the 1.2 struct, which
      // is the whole of today's.
      const bool sized = state->struct_size >=
                         offsetof(kvc_cache_state, sequence_size) + sizeof(state->sequence_size);
      constexpr std::size_t kSequence_1_2 =
          offsetof(kvc_sequence_state, next_position) + sizeof(int64_t);
      const std::size_t stride = sized ? state->sequence_size : kSequence_1_2;
      if (stride < kSequence_1_2)
        throw Error(Code::invalid_argument, "sequence entries of " + std::to_string(stride) +
                                                " bytes are smaller than ABI 1.2's " +
                                                std::to_string(kSequence_1_2));
      std::vector<SequenceState> sequences;
      sequences.reserve(state->n_sequences);
      const auto* entries = reinterpret_cast<const std::byte*>(state->sequences);
      for (uint64_t i = 0; i < state->n_sequences; ++i) {
        kvc_sequence_state s{};  // fields of a newer minor than the host's stay zero
        std::memcpy(&s, entries + i * stride, std::min(stride, sizeof(s)));
        sequences.push_back({s.id, s.tokens, s.pages, s.priority, s.created_step, s.last_used_step,
                             s.next_position});
      }
      const HostTokens tokens(*state);
      const CacheState view{
          state->page_size, state->step, state->total_pages, state->free_pages, state->cached_pages,
          sequences,        &tokens};
      send_plan(policy_call(view), builder);
    });
  }
  static int32_t wants_scores(void* instance, uint32_t* out, kvc_error* err) noexcept {
    return guard(err, [&] { *out = self<T>(instance).wants_scores() ? 1u : 0u; });
  }
  static int32_t drops_tokens(void* instance, uint32_t* out, kvc_error* err) noexcept {
    return guard(err, [&] {
      const std::optional<bool> drops = self<T>(instance).drops_tokens();
      if (!drops) throw Error(Code::unsupported, "the policy does not say whether it drops tokens");
      *out = *drops ? 1u : 0u;
    });
  }
  static int32_t after_step(void* instance, const kvc_cache_state* state, kvc_plan_builder* plan,
                            kvc_error* err) noexcept {
    return decide(state, plan, err,
                  [&](const CacheState& view) { return self<T>(instance).after_step(view); });
  }
  static int32_t on_pressure(void* instance, const kvc_cache_state* state, uint64_t pages_needed,
                             kvc_plan_builder* plan, kvc_error* err) noexcept {
    return decide(state, plan, err, [&](const CacheState& view) {
      return self<T>(instance).on_pressure(view, pages_needed);
    });
  }
  static constexpr kvc_eviction_table table{sizeof(kvc_eviction_table),
                                            &create<T>,
                                            &destroy<T>,
                                            &wants_scores,
                                            &after_step,
                                            &on_pressure,
                                            &drops_tokens};
};

}  // namespace kvcache::sdk::detail
