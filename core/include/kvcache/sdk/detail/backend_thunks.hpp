// The C table of a Backend component: its devices, and the stores and attentions it makes
// (attention_thunks.hpp, store_thunks.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvcache/backend.hpp"
#include "kvcache/plugin_abi.h"
#include "kvcache/sdk/detail/attention_thunks.hpp"
#include "kvcache/sdk/detail/c_types.hpp"
#include "kvcache/sdk/detail/guard.hpp"
#include "kvcache/sdk/detail/instance.hpp"
#include "kvcache/sdk/detail/store_thunks.hpp"
#include "kvcache/sdk/format_codec.hpp"

namespace kvcache::sdk::detail {

template <class T>
struct BackendThunks {
  static int32_t device_count(void* instance, uint32_t* count, kvc_error* err) noexcept {
    return guard(err, [&] { *count = static_cast<uint32_t>(self<T>(instance).devices().size()); });
  }
  static int32_t device_info(void* instance, uint32_t index, kvc_device_info* out,
                             kvc_error* err) noexcept {
    return guard(err, [&] {
      const std::vector<DeviceInfo> devices = self<T>(instance).devices();
      if (index >= devices.size())
        throw Error(Code::invalid_argument, "device index " + std::to_string(index) +
                                                " out of range (" + std::to_string(devices.size()) +
                                                " devices)");
      const DeviceInfo& d = devices[index];
      kvc_device_info c{
          sizeof(kvc_device_info), d.index, d.available ? 1u : 0u, 0, d.memory_bytes, {}, {}};
      std::snprintf(c.name, sizeof(c.name), "%s", d.name.c_str());
      std::snprintf(c.reason, sizeof(c.reason), "%s", d.reason.c_str());
      copy_out(c, out);
    });
  }
  static void make_store(void* instance, const StoreSpec& spec, const kvc_store_table** table,
                         void** store) {
    std::unique_ptr<CacheStore> made = self<T>(instance).create_store(spec);
    if (!made) throw Error(Code::internal, "create_store returned no store");
    *table = &StoreThunks::table;
    *store = made.release();
  }
  static int32_t create_store(void* instance, const char* spec_json, const kvc_store_table** table,
                              void** store, kvc_error* err) noexcept {
    return guard(err, [&] {
      make_store(instance, store_spec_from_json(nlohmann::json::parse(spec_json)), table, store);
    });
  }
  static int32_t create_store_with(void* instance, const kvc_store_args* args,
                                   const kvc_store_table** table, void** store,
                                   kvc_error* err) noexcept {
    return guard(err, [&] {
      if (args == nullptr ||
          args->struct_size < offsetof(kvc_store_args, v_codec) + sizeof(args->v_codec) ||
          args->spec_json == nullptr)
        throw Error(Code::invalid_argument, "store arguments are incomplete");
      StoreSpec spec = store_spec_from_json(nlohmann::json::parse(args->spec_json));
      if (args->k_codec != nullptr) spec.k_codec = std::make_shared<LentQuantizer>(*args->k_codec);
      if (args->v_codec != nullptr) spec.v_codec = std::make_shared<LentQuantizer>(*args->v_codec);
      make_store(instance, spec, table, store);
    });
  }
  static int32_t create_attention(void* instance, const kvc_attention_table** table,
                                  void** attention, kvc_error* err) noexcept {
    return guard(err, [&] {
      std::unique_ptr<Attention> made = self<T>(instance).create_attention();
      if (!made) throw Error(Code::internal, "create_attention returned no attention");
      *table = &AttentionThunks::table;
      *attention = made.release();
    });
  }
  static int32_t memory_bandwidth(void* instance, uint64_t bytes, double* gbps,
                                  kvc_error* err) noexcept {
    return guard(err,
                 [&] { *gbps = self<T>(instance).memory_bandwidth_gbps(bytes).value_or(0.0); });
  }
  static constexpr kvc_backend_table table{sizeof(kvc_backend_table),
                                           &create<T>,
                                           &destroy<T>,
                                           &device_count,
                                           &device_info,
                                           &create_store,
                                           &create_attention,
                                           &memory_bandwidth,
                                           &create_store_with};
};

}  // namespace kvcache::sdk::detail
