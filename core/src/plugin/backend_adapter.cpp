#include "kvcache/backend.hpp"

#include <cstddef>
#include <cstring>

#include "kvcache/sdk/format_codec.hpp"
#include "plugin/adapters.hpp"
#include "plugin/descriptor_check.hpp"

namespace kvcache::plugin {
namespace {

class HostBackend final : public Backend {
 public:
  HostBackend(std::unique_ptr<PluginInstance<kvc_backend_table>> instance, AttentionTraits traits)
      : instance_(std::move(instance)), traits_(traits) {}

  std::vector<DeviceInfo> devices() const override {
    uint32_t count = 0;
    instance_->call(&kvc_backend_table::device_count, &count);
    std::vector<DeviceInfo> result;
    result.reserve(count);
    for (uint32_t i = 0; i < count; ++i) {
      kvc_device_info d{};
      d.struct_size = sizeof(d);
      instance_->call(&kvc_backend_table::device_info, i, &d);
      result.push_back({d.index, std::string(d.name, strnlen(d.name, sizeof(d.name))),
                        d.memory_bytes, d.available != 0,
                        std::string(d.reason, strnlen(d.reason, sizeof(d.reason)))});
    }
    return result;
  }

  // From ABI 1.3 on the formats' codecs go with the spec, so the store can run a format it has
  // no kernels for; the store keeps them alive. An older backend gets the spec alone.
  std::unique_ptr<CacheStore> create_store(const StoreSpec& spec) override {
    const kvc_store_table* table = nullptr;
    void* store = nullptr;
    const std::string json = to_json(spec).dump();
    if (instance_->has(&kvc_backend_table::create_store_with)) {
      const kvc_format_codec k =
          spec.k_codec ? sdk::lend(spec.k_format, *spec.k_codec) : kvc_format_codec{};
      const kvc_format_codec v =
          spec.v_codec ? sdk::lend(spec.v_format, *spec.v_codec) : kvc_format_codec{};
      const kvc_store_args args{sizeof(kvc_store_args), 0, json.c_str(),
                                spec.k_codec ? &k : nullptr, spec.v_codec ? &v : nullptr};
      instance_->call(&kvc_backend_table::create_store_with, &args, &table, &store);
    } else {
      instance_->call(&kvc_backend_table::create_store, json.c_str(), &table, &store);
    }
    check_made(table, store, "store", offsetof(kvc_store_table, format));
    return make_store(instance_->library(), table, store, instance_->who() + " store",
                      {spec.k_codec, spec.v_codec});
  }

  std::unique_ptr<Attention> create_attention() override {
    const kvc_attention_table* table = nullptr;
    void* attention = nullptr;
    instance_->call(&kvc_backend_table::create_attention, &table, &attention);
    check_made(table, attention, "attention", offsetof(kvc_attention_table, plan));
    return make_attention(instance_->library(), table, attention, instance_->who() + " attention",
                          traits_);
  }

  std::optional<double> memory_bandwidth_gbps(std::uint64_t bytes) override {
    if (!instance_->has(&kvc_backend_table::memory_bandwidth))
      return std::nullopt;  // an ABI 1.0 backend
    double gbps = 0.0;
    instance_->call(&kvc_backend_table::memory_bandwidth, bytes, &gbps);
    return gbps > 0.0 ? std::optional<double>(gbps) : std::nullopt;
  }

 private:
  // An object the backend made must come with a table this host can use (else it is freed).
  // `least`: the table's size in ABI 1.0.
  template <class Table>
  void check_made(const Table* table, void* object, const char* what, std::size_t least) const {
    if (table == nullptr || object == nullptr)
      throw Error(Code::internal, instance_->who() + ": made no " + what);
    if (table->struct_size < least) {
      table->destroy(object);
      throw Error(Code::internal,
                  instance_->who() + ": " + what + " table is too small for ABI 1.0");
    }
  }

  std::unique_ptr<PluginInstance<kvc_backend_table>> instance_;
  AttentionTraits traits_;
};

}  // namespace

std::unique_ptr<Backend> make_backend(std::shared_ptr<const PluginLibrary> library,
                                      const kvc_component& component,
                                      const std::string& options_json, const std::string& who) {
  const Capabilities caps = capabilities_of(component);
  const AttentionTraits traits{caps.query_rotation, caps.engine_streams};
  return std::make_unique<HostBackend>(
      create_instance<kvc_backend_table>(std::move(library), component, options_json, who), traits);
}

}  // namespace kvcache::plugin
