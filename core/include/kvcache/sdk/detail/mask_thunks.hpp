// The C table of an AttentionMask component.
#pragma once

#include <cstdint>
#include <vector>

#include "kvcache/mask.hpp"
#include "kvcache/plugin_abi.h"
#include "kvcache/sdk/detail/guard.hpp"
#include "kvcache/sdk/detail/instance.hpp"

namespace kvcache::sdk::detail {

static_assert(sizeof(PositionRange) == sizeof(kvc_range) &&
              alignof(PositionRange) == alignof(kvc_range));

template <class T>
struct MaskThunks {
  static int32_t describe(void* instance, kvc_mask_desc* out, kvc_error* err) noexcept {
    return guard(err, [&] {
      const MaskDescription d = self<T>(instance).describe();
      kvc_mask_desc c{sizeof(kvc_mask_desc),
                      static_cast<std::uint32_t>(d.kind),
                      d.max_ranges,
                      d.positions_in_cache ? KVC_MASK_POSITIONS_IN_CACHE : 0u,
                      d.window,
                      d.sinks,
                      d.chunk};
      copy_out(c, out);
    });
  }
  static int32_t visible(void* instance, const int64_t* queries, uint64_t n, kvc_range* ranges,
                         uint32_t* counts, kvc_error* err) noexcept {
    return guard(err, [&] {
      const T& mask = self<T>(instance);
      const std::size_t per_query = mask.describe().max_ranges;
      mask.visible(
          std::span<const Position>(queries, n),
          std::span<PositionRange>(reinterpret_cast<PositionRange*>(ranges), n * per_query),
          std::span<std::uint32_t>(counts, n));
    });
  }
  static int32_t query_positions(void* instance, const int64_t* queries, uint64_t n,
                                 const kvc_range* ranges, const uint32_t* counts,
                                 int64_t* positions, kvc_error* err) noexcept {
    return guard(err, [&] {
      const T& mask = self<T>(instance);
      const std::size_t per_query = mask.describe().max_ranges;
      mask.query_positions(std::span<const Position>(queries, n),
                           std::span<const PositionRange>(
                               reinterpret_cast<const PositionRange*>(ranges), n * per_query),
                           std::span<const std::uint32_t>(counts, n),
                           std::span<Position>(positions, n * per_query));
    });
  }
  static constexpr kvc_mask_table table{
      sizeof(kvc_mask_table), &create<T>, &destroy<T>, &describe, &visible, &query_positions};
};

}  // namespace kvcache::sdk::detail
