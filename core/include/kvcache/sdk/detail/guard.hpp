// Status plumbing of the SDK: every exception becomes a status before it can reach C.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <string_view>

#include "kvcache/plugin_abi.h"
#include "kvcache/status.hpp"

namespace kvcache::sdk::detail {

inline int32_t set_status(kvc_error* err, int32_t code, std::string_view message) noexcept {
  if (err != nullptr) {
    err->code = code;
    const std::size_t n = std::min(message.size(), sizeof(err->message) - 1);
    std::memcpy(err->message, message.data(), n);
    err->message[n] = '\0';
  }
  return code;
}

// Runs `body`; every exception becomes a status, so none crosses the C boundary.
template <class F>
int32_t guard(kvc_error* err, F&& body) noexcept {
  try {
    body();
    return set_status(err, KVC_OK, "");
  } catch (const Error& e) {
    return set_status(err, static_cast<int32_t>(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    return set_status(err, KVC_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return set_status(err, KVC_INTERNAL, e.what());
  } catch (...) {
    return set_status(err, KVC_INTERNAL, "unknown exception");
  }
}

// Copies a filled struct into a host struct of another version: only the common prefix is
// written, and struct_size says how much of it this plugin filled (a newer host then knows
// which of its fields were left unset).
template <class S>
void copy_out(const S& filled, S* out) {
  const std::size_t common = std::min<std::size_t>(out->struct_size, sizeof(S));
  std::memcpy(out, &filled, common);
  out->struct_size = static_cast<std::uint32_t>(common);
}

}  // namespace kvcache::sdk::detail
