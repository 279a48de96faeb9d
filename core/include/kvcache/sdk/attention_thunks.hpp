// The C table of every Attention a plugin makes: one table, dispatching through the virtual
// interface. The store handle it receives is one the same plugin made.
#pragma once

#include <span>

#include "kvcache/attention.hpp"
#include "kvcache/plugin_abi.h"
#include "kvcache/sdk/guard.hpp"

namespace kvcache::sdk::detail {

struct AttentionThunks {
  static AttentionRequest request(const kvc_attention_args& a) {
    AttentionRequest r;
    r.layer = a.layer;
    r.sequences = std::span<const SeqId>(a.sequences, a.n_sequences);
    if (a.query_counts != nullptr)
      r.query_counts = std::span<const std::uint32_t>(a.query_counts, a.n_sequences);
    r.q = a.q;
    r.out = a.out;
    r.visible.ranges = std::span<const PositionRange>(
        reinterpret_cast<const PositionRange*>(a.ranges), a.n_queries * a.max_ranges);
    r.visible.counts = std::span<const std::uint32_t>(a.range_counts, a.n_queries);
    r.visible.max_ranges = a.max_ranges;
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
  static constexpr kvc_attention_table table{sizeof(kvc_attention_table), &destroy, &decode,
                                             &prefill};
};

}  // namespace kvcache::sdk::detail
