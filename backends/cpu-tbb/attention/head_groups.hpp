// How a KV head's query heads reach the kernels, whose passes are specialized for groups of 1, 2,
// 4 and 8, and on AVX2 for any group of 1 to 8 (block16.hpp). A group is split into `parts` of at
// most 8 heads, each (where the family has powers of two only) padded to the next specialized
// width with copies of its last head, whose outputs are dropped. Each part is a kernel head of
// its own reading the KV head's K and V. So on AVX-512 SmolLM2's 3 heads run as 4, Qwen2.5's 7
// as 8, and 12 as two parts of 6 padded to 8; on AVX2 as 3, 7 and two parts of 6. A copy rather
// than zeros keeps the integer query quantizers away from an all-zero row, and a part never
// mixes heads of two KV heads.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

#include "kernels/block16.hpp"
#include "kernels/cpu_features.hpp"

namespace kvcache::cpu {

struct HeadGroups {
  std::uint32_t group = 1;     // the model's query heads per KV head
  std::uint32_t parts = 1;     // kernel heads per KV head
  std::uint32_t per_part = 1;  // query heads of each part (the last may hold fewer)
  std::uint32_t width = 1;     // the kernels' group: per_part, padded where that is specialized

  HeadGroups() = default;  // one head a KV head
  // For the passes of `isa`'s family (the portable path pads as AVX-512 does).
  HeadGroups(std::uint32_t model_group, std::uint32_t dim, VectorIsa isa)
      : group(model_group),
        parts(specialized_dim(dim) ? (model_group + kMaxGroup - 1) / kMaxGroup : 1),
        per_part((model_group + parts - 1) / parts),
        width(specialized_dim(dim) && !takes_any_group(isa) ? std::bit_ceil(per_part) : per_part) {}

  // Of the part's heads, where they start in the KV head's group and how many are real.
  std::uint32_t first(std::uint32_t part) const { return part * per_part; }
  std::uint32_t count(std::uint32_t part) const { return std::min(per_part, group - first(part)); }
  // The query head (of the model) behind head g of kernel head `kernel_head`.
  std::uint32_t query_head(std::uint32_t kernel_head, std::uint32_t g) const {
    const std::uint32_t part = kernel_head % parts;
    return kernel_head / parts * group + first(part) + std::min(g, count(part) - 1);
  }
};

}  // namespace kvcache::cpu
