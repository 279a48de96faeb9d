// A component instance across the C boundary: made from its JSON options, freed, asked whether
// it can run here.
#pragma once

#include "kvcache/plugin_abi.h"
#include "kvcache/sdk/component_spec.hpp"
#include "kvcache/sdk/detail/guard.hpp"
#include "kvcache/sdk/options.hpp"
#include "kvcache/status.hpp"

namespace kvcache::sdk::detail {

template <class T>
int32_t create(const char* options_json, void** instance, kvc_error* err) noexcept {
  return guard(err, [&] { *instance = new T(Options::parse(options_json)); });
}

template <class T>
void destroy(void* instance) noexcept {
  delete static_cast<T*>(instance);
}

template <class T>
int32_t availability(kvc_error* err) noexcept {
  return guard(err, [&] {
    const Availability a = T::availability();
    if (!a.available) throw Error(Code::unavailable, a.reason);
  });
}

template <class T>
T& self(void* instance) {
  return *static_cast<T*>(instance);
}

}  // namespace kvcache::sdk::detail
