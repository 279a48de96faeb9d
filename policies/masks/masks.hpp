// The known attention masks. Each answers with at most two ranges per query and stays causal
// (a query never sees a later position).
#pragma once

#include <cstdint>
#include <span>

#include "kvcache/mask.hpp"
#include "kvcache/sdk/options.hpp"

namespace kvcache::masks {

// Fills counts/ranges for each query from `rule(q, out) -> number of ranges written`.
template <class Rule>
void for_each_query(std::span<const Position> queries, std::span<PositionRange> ranges,
                    std::span<std::uint32_t> counts, std::uint32_t max_ranges, Rule&& rule) {
  for (std::size_t i = 0; i < queries.size(); ++i) {
    if (queries[i] < 0) throw Error(Code::invalid_argument, "negative query position");
    counts[i] = rule(queries[i], ranges.subspan(i * max_ranges, max_ranges));
  }
}

// Every earlier position and itself: [0, q].
class Causal final : public AttentionMask {
 public:
  explicit Causal(const sdk::Options& options);
  MaskDescription describe() const override;
  void visible(std::span<const Position> queries, std::span<PositionRange> ranges,
               std::span<std::uint32_t> counts) const override;
};

// The last `window` positions, itself included: [q - window + 1, q].
class SlidingWindow final : public AttentionMask {
 public:
  explicit SlidingWindow(const sdk::Options& options);
  MaskDescription describe() const override;
  void visible(std::span<const Position> queries, std::span<PositionRange> ranges,
               std::span<std::uint32_t> counts) const override;

 private:
  std::int64_t window_ = 0;
};

// StreamingLLM: the first `sinks` positions plus the last `window`. Unlike the seed, the first
// positions do not see later sink tokens.
class SinkWindow final : public AttentionMask {
 public:
  explicit SinkWindow(const sdk::Options& options);
  MaskDescription describe() const override;
  void visible(std::span<const Position> queries, std::span<PositionRange> ranges,
               std::span<std::uint32_t> counts) const override;
  // positions: cache: the sinks see the query at its position within the cache (sinks, then the
  // window), as StreamingLLM numbers them; the window sees it where it is (same distances).
  void query_positions(std::span<const Position> queries, std::span<const PositionRange> ranges,
                       std::span<const std::uint32_t> counts,
                       std::span<Position> positions) const override;

 private:
  std::int64_t sinks_ = 0;
  std::int64_t window_ = 0;
  bool in_cache_ = false;  // positions: cache
};

// Local attention within fixed blocks (Llama-4 style): [chunk * floor(q / chunk), q].
class Chunked final : public AttentionMask {
 public:
  explicit Chunked(const sdk::Options& options);
  MaskDescription describe() const override;
  void visible(std::span<const Position> queries, std::span<PositionRange> ranges,
               std::span<std::uint32_t> counts) const override;

 private:
  std::int64_t chunk_ = 0;
};

// An example of a mask known to kernels only through its ranges (MaskKind::custom), as a third
// party's would be: a query sees its own block of `block` positions and the block before it.
class BlockLocal final : public AttentionMask {
 public:
  explicit BlockLocal(const sdk::Options& options);
  MaskDescription describe() const override;
  void visible(std::span<const Position> queries, std::span<PositionRange> ranges,
               std::span<std::uint32_t> counts) const override;

 private:
  std::int64_t block_ = 0;
};

// A required option that must be at least `minimum`.
inline std::int64_t at_least(const sdk::Options& options, const char* key, std::int64_t minimum) {
  const auto value = options.require<std::int64_t>(key);
  if (value < minimum)
    throw Error(Code::invalid_argument, std::string("option '") + key + "' must be at least " +
                                            std::to_string(minimum) + ", got " +
                                            std::to_string(value));
  return value;
}

}  // namespace kvcache::masks
