// The C table of every Attention a plugin makes: one table, dispatching through the virtual
// interface (plan a step, run it per layer). The store handle it receives is one the same plugin
// made.
#pragma once

#include <cstddef>
#include <span>
#include <type_traits>

#include "kvcache/attention.hpp"
#include "kvcache/plugin_abi.h"
#include "kvcache/sdk/detail/guard.hpp"

namespace kvcache::sdk::detail {

struct AttentionThunks {
  // rotations: those of a host of ABI 1.6 or later (an older one's args end before the field).
  template <class Args>
  static VisibleRanges visible(const Args& a) {
    VisibleRanges v{std::span<const PositionRange>(reinterpret_cast<const PositionRange*>(a.ranges),
                                                   a.n_queries * a.max_ranges),
                    std::span<const std::uint32_t>(a.range_counts, a.n_queries),
                    a.max_ranges,
                    {}};
    const bool has_field = a.struct_size >= offsetof(Args, rotations) + sizeof(a.rotations);
    if (!has_field || a.rotations == nullptr) return v;
    const kvc_query_rotation& r = *a.rotations;
    if (r.struct_size < sizeof(kvc_query_rotation) || r.rotary_dims == 0 ||
        r.range_rotation == nullptr || r.cos_sin == nullptr)
      throw Error(Code::invalid_argument, "query rotations: incomplete");
    v.rotations = {static_cast<RopeStyle>(r.style), r.rotary_dims,
                   std::span<const float>(r.cos_sin, r.n_rotations * r.rotary_dims),
                   std::span<const std::uint32_t>(r.range_rotation, v.ranges.size())};
    return v;
  }
  // The step a host's args describe (a per-layer call's args name one layer more, and its q and
  // out).
  template <class Args>
  static StepRequest step_request(const Args& a) {
    StepRequest r;
    r.sequences = std::span<const SeqId>(a.sequences, a.n_sequences);
    if (a.query_counts != nullptr)
      r.query_counts = std::span<const std::uint32_t>(a.query_counts, a.n_sequences);
    r.visible = visible(a);
    r.scale = a.scale;
    r.accumulate_scores = a.accumulate_scores != 0;
    if constexpr (std::is_same_v<Args, kvc_step_args>)  // ABI 1.10: the engine's stream
      if (a.struct_size >= offsetof(kvc_step_args, stream) + sizeof(a.stream) && a.on_stream != 0)
        r.stream = EngineStream{a.stream};
    return r;
  }
  static Attention& self(void* a) { return *static_cast<Attention*>(a); }
  static CacheStore& store(void* s) { return *static_cast<CacheStore*>(s); }

  static void destroy(void* a) noexcept { delete static_cast<Attention*>(a); }
  // A host before ABI 1.4 calls decode and prefill per layer: each is a step of one layer.
  static int32_t attend(void* a, void* s, const kvc_attention_args* args, kvc_error* err) noexcept {
    return guard(err, [&] {
      if (args->q == nullptr || args->out == nullptr)
        throw Error(Code::invalid_argument, "q and out are required");
      const auto plan = self(a).plan(store(s), step_request(*args));
      self(a).run(store(s), *plan, args->layer, *args->q, *args->out);
    });
  }
  static int32_t plan(void* a, void* s, const kvc_step_args* args, void** out,
                      kvc_error* err) noexcept {
    return guard(err, [&] { *out = self(a).plan(store(s), step_request(*args)).release(); });
  }
  static int32_t run(void* a, void* s, void* plan, uint32_t layer, const DLTensor* q, DLTensor* out,
                     kvc_error* err) noexcept {
    return guard(err, [&] {
      if (plan == nullptr || q == nullptr || out == nullptr)
        throw Error(Code::invalid_argument, "run: plan, q and out are required");
      self(a).run(store(s), *static_cast<const StepPlan*>(plan), layer, *q, *out);
    });
  }
  static void destroy_plan(void*, void* plan) noexcept { delete static_cast<StepPlan*>(plan); }
  static int32_t finish(void* a, void* s, void* plan, void* event, kvc_error* err) noexcept {
    return guard(err, [&] {
      if (plan == nullptr) throw Error(Code::invalid_argument, "finish: a plan is required");
      self(a).finish(store(s), *static_cast<const StepPlan*>(plan), event);
    });
  }
  static constexpr kvc_attention_table table{
      sizeof(kvc_attention_table), &destroy, &attend, &attend, &plan, &run, &destroy_plan, &finish};
};

}  // namespace kvcache::sdk::detail
