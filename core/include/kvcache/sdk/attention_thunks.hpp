// The C table of every Attention a plugin makes: one table, dispatching through the virtual
// interface. The store handle it receives is one the same plugin made.
#pragma once

#include <cstddef>
#include <span>

#include "kvcache/attention.hpp"
#include "kvcache/plugin_abi.h"
#include "kvcache/sdk/guard.hpp"

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
  static AttentionRequest request(const kvc_attention_args& a) {
    AttentionRequest r;
    r.layer = a.layer;
    r.sequences = std::span<const SeqId>(a.sequences, a.n_sequences);
    if (a.query_counts != nullptr)
      r.query_counts = std::span<const std::uint32_t>(a.query_counts, a.n_sequences);
    r.q = a.q;
    r.out = a.out;
    r.visible = visible(a);
    r.scale = a.scale;
    r.accumulate_scores = a.accumulate_scores != 0;
    return r;
  }
  static Attention& self(void* a) { return *static_cast<Attention*>(a); }
  static CacheStore& store(void* s) { return *static_cast<CacheStore*>(s); }

  static void destroy(void* a) noexcept { delete static_cast<Attention*>(a); }
  static int32_t decode(void* a, void* s, const kvc_attention_args* args, kvc_error* err) noexcept {
    return guard(err, [&] { self(a).decode(store(s), request(*args)); });
  }
  static int32_t prefill(void* a, void* s, const kvc_attention_args* args,
                         kvc_error* err) noexcept {
    return guard(err, [&] { self(a).prefill(store(s), request(*args)); });
  }
  static StepRequest step_request(const kvc_step_args& a) {
    StepRequest r;
    r.sequences = std::span<const SeqId>(a.sequences, a.n_sequences);
    if (a.query_counts != nullptr)
      r.query_counts = std::span<const std::uint32_t>(a.query_counts, a.n_sequences);
    r.visible = visible(a);
    r.scale = a.scale;
    r.accumulate_scores = a.accumulate_scores != 0;
    return r;
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
  static constexpr kvc_attention_table table{
      sizeof(kvc_attention_table), &destroy, &decode, &prefill, &plan, &run, &destroy_plan};
};

}  // namespace kvcache::sdk::detail
