// Error codes and the exception type used across the C++ API. The same codes cross the plugin
// boundary as plain integers (see plugin_abi.h), so a plugin's error arrives as the same Error.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "kvcache/export.hpp"
#include "kvcache/plugin_abi.h"

namespace kvcache {

enum class Code : std::int32_t {
  ok = KVC_OK,
  invalid_argument = KVC_INVALID_ARGUMENT,
  not_found = KVC_NOT_FOUND,
  out_of_memory = KVC_OUT_OF_MEMORY,
  unsupported = KVC_UNSUPPORTED,
  unavailable = KVC_UNAVAILABLE,
  internal = KVC_INTERNAL,
};

// Stable lower-case name of a code, e.g. "out_of_memory"; "unknown" for values from a newer ABI.
std::string_view code_name(Code code) noexcept;

class KVCACHE_API Error : public std::runtime_error {
 public:
  Error(Code code, const std::string& message) : std::runtime_error(message), code_(code) {}
  Code code() const noexcept { return code_; }

 private:
  Code code_;
};

}  // namespace kvcache
