#include "masks.hpp"

namespace kvcache::masks {

Causal::Causal(const sdk::Options& options) {
  options.only({});
}

MaskDescription Causal::describe() const {
  return {MaskKind::causal, 1, 0, 0, 0};
}

void Causal::visible(std::span<const Position> queries, std::span<PositionRange> ranges,
                     std::span<std::uint32_t> counts) const {
  for_each_query(queries, ranges, counts, 1, [](Position q, std::span<PositionRange> out) {
    out[0] = {0, q + 1};
    return 1u;
  });
}

}  // namespace kvcache::masks
