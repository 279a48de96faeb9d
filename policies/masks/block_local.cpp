#include <algorithm>

#include "masks.hpp"

namespace kvcache::masks {

BlockLocal::BlockLocal(const sdk::Options& options) {
  options.only({"block"});
  block_ = at_least(options, "block", 1);
}

MaskDescription BlockLocal::describe() const {
  return {MaskKind::custom, 1, 0, 0, 0};
}

void BlockLocal::visible(std::span<const Position> queries, std::span<PositionRange> ranges,
                         std::span<std::uint32_t> counts) const {
  for_each_query(queries, ranges, counts, 1, [&](Position q, std::span<PositionRange> out) {
    out[0] = {std::max<Position>(0, (q / block_ - 1) * block_), q + 1};
    return 1u;
  });
}

}  // namespace kvcache::masks
