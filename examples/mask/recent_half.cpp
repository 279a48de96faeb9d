// An out-of-tree mask known to kvcache only through its range query: a query at position q sees
// the most recent half of its context, [q / 2, q].
#include <kvcache/sdk/plugin.hpp>

namespace {

class RecentHalf final : public kvcache::AttentionMask {
 public:
  explicit RecentHalf(const kvcache::sdk::Options& options) { options.only({}); }
  kvcache::MaskDescription describe() const override { return {}; }  // custom, one range
  void visible(std::span<const kvcache::Position> queries, std::span<kvcache::PositionRange> ranges,
               std::span<std::uint32_t> counts) const override {
    for (std::size_t i = 0; i < queries.size(); ++i) {
      ranges[i] = {queries[i] / 2, queries[i] + 1};
      counts[i] = 1;
    }
  }
};

}  // namespace

KVCACHE_PLUGIN("recent-half", "1.0.0", kvcache::sdk::component<RecentHalf>("recent-half", "1.0.0"))
