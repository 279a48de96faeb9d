#include "kvcache/mask.hpp"

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
    description_ = {static_cast<MaskKind>(d.kind), d.max_ranges, d.window, d.sinks, d.chunk};
  }

  // Fixed for the object's life, so it is asked once.
  MaskDescription describe() const override { return description_; }

  void visible(std::span<const Position> queries, std::span<PositionRange> ranges,
               std::span<std::uint32_t> counts) const override {
    if (ranges.size() < queries.size() * description_.max_ranges || counts.size() < queries.size())
      throw Error(Code::invalid_argument, instance_->who() + ": output spans too small");
    instance_->call(&kvc_mask_table::visible, queries.data(), uint64_t{queries.size()},
                    reinterpret_cast<kvc_range*>(ranges.data()), counts.data());
  }

 private:
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
