#include "kvcache/quantizer.hpp"

#include "plugin/adapters.hpp"
#include "plugin/c_types.hpp"

namespace kvcache::plugin {
namespace {

class HostQuantizer final : public Quantizer {
 public:
  explicit HostQuantizer(std::unique_ptr<PluginInstance<kvc_quantizer_table>> instance)
      : instance_(std::move(instance)) {}

  TileLayout describe(std::uint32_t head_dim, std::uint32_t page_size) const override {
    kvc_format_desc d{};
    d.struct_size = sizeof(d);
    instance_->call(&kvc_quantizer_table::describe, head_dim, page_size, &d);
    return from_c(d);
  }
  void encode(const DLTensor& src, std::uint32_t first_slot, std::uint32_t page_size,
              void* tile) const override {
    instance_->call(&kvc_quantizer_table::encode, &src, first_slot, page_size, tile);
  }
  void decode(const void* tile, std::uint32_t first_slot, std::uint32_t page_size,
              DLTensor& dst) const override {
    instance_->call(&kvc_quantizer_table::decode, tile, first_slot, page_size, &dst);
  }

 private:
  std::unique_ptr<PluginInstance<kvc_quantizer_table>> instance_;
};

}  // namespace

std::unique_ptr<Quantizer> make_quantizer(std::shared_ptr<const PluginLibrary> library,
                                          const kvc_component& component,
                                          const std::string& options_json, const std::string& who) {
  return std::make_unique<HostQuantizer>(
      create_instance<kvc_quantizer_table>(std::move(library), component, options_json, who));
}

}  // namespace kvcache::plugin
