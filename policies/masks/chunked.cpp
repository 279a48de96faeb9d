#include "masks.hpp"

namespace kvcache::masks {

Chunked::Chunked(const sdk::Options& options) {
  options.only({"chunk"});
  chunk_ = at_least(options, "chunk", 1);
}

MaskDescription Chunked::describe() const {
  return {MaskKind::chunked, 1, 0, 0, chunk_};
}

void Chunked::visible(std::span<const Position> queries, std::span<PositionRange> ranges,
                      std::span<std::uint32_t> counts) const {
  for_each_query(queries, ranges, counts, 1, [&](Position q, std::span<PositionRange> out) {
    out[0] = {q - q % chunk_, q + 1};
    return 1u;
  });
}

}  // namespace kvcache::masks
