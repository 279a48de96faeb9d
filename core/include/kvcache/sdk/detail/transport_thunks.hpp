// The C table of a transport of the remote tier (remote::ByteStore).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvcache/plugin_abi.h"
#include "kvcache/remote/byte_store.hpp"
#include "kvcache/sdk/detail/guard.hpp"
#include "kvcache/sdk/detail/instance.hpp"

namespace kvcache::sdk::detail {

template <class T>
struct TransportThunks {
  static std::vector<std::string> keys_of(const char* const* keys, uint64_t n) {
    return std::vector<std::string>(keys, keys + n);
  }
  static int32_t probe(void* instance, const char* const* keys, uint64_t n, uint8_t* held,
                       kvc_error* err) noexcept {
    return guard(err, [&] {
      const std::vector<bool> answer = self<T>(instance).probe(keys_of(keys, n));
      for (uint64_t i = 0; i < n; ++i) held[i] = i < answer.size() && answer[i] ? 1 : 0;
    });
  }
  static int32_t get(void* instance, const char* const* keys, uint64_t n, kvc_value_sink sink,
                     void* context, kvc_error* err) noexcept {
    return guard(err, [&] {
      self<T>(instance).get_each(keys_of(keys, n),
                                 [&](std::size_t i, std::span<const std::byte> v) {
                                   if (i < n && sink(context, i, v.data(), v.size()) != KVC_OK)
                                     throw Error(Code::internal, "the host refused a value");
                                 });
    });
  }
  static int32_t put_if_absent(void* instance, const char* const* keys, const void* const* values,
                               const uint64_t* sizes, uint64_t n, uint8_t* stored,
                               kvc_error* err) noexcept {
    return guard(err, [&] {
      std::vector<remote::Value> v;
      for (uint64_t i = 0; i < n; ++i) {
        const auto* bytes = static_cast<const std::byte*>(values[i]);
        v.emplace_back(bytes, bytes + sizes[i]);
      }
      const std::vector<bool> answer = self<T>(instance).put_if_absent(keys_of(keys, n), v);
      for (uint64_t i = 0; i < n; ++i) stored[i] = i < answer.size() && answer[i] ? 1 : 0;
    });
  }
  static int32_t remove(void* instance, const char* const* keys, uint64_t n,
                        kvc_error* err) noexcept {
    return guard(err, [&] { self<T>(instance).remove(keys_of(keys, n)); });
  }
  static int32_t describe(void* instance, char* out, uint64_t capacity, kvc_error* err) noexcept {
    return guard(err, [&] {
      if (capacity > 0) std::snprintf(out, capacity, "%s", self<T>(instance).describe().c_str());
    });
  }
  static constexpr kvc_transport_table table{sizeof(kvc_transport_table),
                                             &create<T>,
                                             &destroy<T>,
                                             &probe,
                                             &get,
                                             &put_if_absent,
                                             &remove,
                                             &describe};
};

}  // namespace kvcache::sdk::detail
