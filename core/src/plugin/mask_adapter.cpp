#include "kvcache/mask.hpp"

#include <string>

#include "plugin/adapters.hpp"

namespace kvcache::plugin {
namespace {

static_assert(sizeof(PositionRange) == sizeof(kvc_range) &&
              alignof(PositionRange) == alignof(kvc_range));

class HostMask final : public AttentionMask {
 public:
  explicit HostMask(std::unique_ptr<PluginInstance<kvc_mask_table>> instance)
      : instance_(std::move(instance)) {
    kvc_mask_desc d{sizeof(kvc_mask_desc), 0, 0, 0, 0, 0, 0};
    instance_->call(&kvc_mask_table::describe, &d);
    if (d.max_ranges == 0) throw Error(Code::internal, instance_->who() + ": max_ranges is 0");
    // The flags are read from masks of ABI 1.6 on (the table has query_positions): an older
    // one's field was reserved.
    const bool positioned = instance_->has(&kvc_mask_table::query_positions) &&
                            (d.flags & KVC_MASK_POSITIONS_IN_CACHE) != 0;
    description_ = {
        static_cast<MaskKind>(d.kind), d.max_ranges, d.window, d.sinks, d.chunk, positioned};
  }

  // Fixed for the object's life, so it is asked once.
  MaskDescription describe() const override { return description_; }

  void visible(std::span<const Position> queries, std::span<PositionRange> ranges,
               std::span<std::uint32_t> counts) const override {
    if (ranges.size() < queries.size() * description_.max_ranges || counts.size() < queries.size())
      throw Error(Code::invalid_argument, instance_->who() + ": output spans too small");
    instance_->call(&kvc_mask_table::visible, queries.data(), uint64_t{queries.size()},
                    reinterpret_cast<kvc_range*>(ranges.data()), counts.data());
    check(queries, ranges, counts);
  }

  void query_positions(std::span<const Position> queries, std::span<const PositionRange> ranges,
                       std::span<const std::uint32_t> counts,
                       std::span<Position> positions) const override {
    const std::size_t max = description_.max_ranges;
    if (!description_.positions_in_cache)
      return AttentionMask::query_positions(queries, ranges, counts, positions);
    if (ranges.size() < queries.size() * max || counts.size() < queries.size() ||
        positions.size() < queries.size() * max)
      throw Error(Code::invalid_argument, instance_->who() + ": spans too small");
    instance_->call(&kvc_mask_table::query_positions, queries.data(), uint64_t{queries.size()},
                    reinterpret_cast<const kvc_range*>(ranges.data()), counts.data(),
                    positions.data());
    for (std::size_t i = 0; i < queries.size(); ++i)
      for (std::uint32_t k = 0; k < counts[i]; ++k)
        if (positions[i * max + k] < 0)
          throw Error(Code::internal, instance_->who() + ": for the query at position " +
                                          std::to_string(queries[i]) + ", range " +
                                          std::to_string(k) + " places it at position " +
                                          std::to_string(positions[i * max + k]) + ", below 0");
  }

 private:
  // What attention relies on: at most max_ranges ranges per query, each of positions >= 0,
  // ascending and apart. An answer that breaks it is the mask's bug, refused with its name.
  void check(std::span<const Position> queries, std::span<const PositionRange> ranges,
             std::span<const std::uint32_t> counts) const {
    const std::uint32_t max = description_.max_ranges;
    for (std::size_t i = 0; i < queries.size(); ++i) {
      const auto refuse = [&](const std::string& what) {
        throw Error(Code::internal, instance_->who() + ": for the query at position " +
                                        std::to_string(queries[i]) + ", " + what);
      };
      if (counts[i] > max)
        refuse("answered " + std::to_string(counts[i]) + " ranges, more than its " +
               std::to_string(max));
      Position end = 0;
      for (std::uint32_t j = 0; j < counts[i]; ++j) {
        const PositionRange r = ranges[i * max + j];
        if (r.begin < end || r.end < r.begin)
          refuse("range [" + std::to_string(r.begin) + ", " + std::to_string(r.end) +
                 ") is reversed, starts below 0 or overlaps the range before it");
        end = r.end;
      }
    }
  }

  std::unique_ptr<PluginInstance<kvc_mask_table>> instance_;
  MaskDescription description_;
};

}  // namespace

std::unique_ptr<AttentionMask> make_mask(std::shared_ptr<const PluginLibrary> library,
                                         const kvc_component& component,
                                         const std::string& options_json, const std::string& who) {
  return std::make_unique<HostMask>(
      create_instance<kvc_mask_table>(std::move(library), component, options_json, who));
}

}  // namespace kvcache::plugin
