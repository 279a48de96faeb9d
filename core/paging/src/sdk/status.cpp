#include "kvcache/status.hpp"

namespace kvcache {

std::string_view code_name(Code code) noexcept {
  switch (code) {
    case Code::ok:
      return "ok";
    case Code::invalid_argument:
      return "invalid_argument";
    case Code::not_found:
      return "not_found";
    case Code::out_of_memory:
      return "out_of_memory";
    case Code::unsupported:
      return "unsupported";
    case Code::unavailable:
      return "unavailable";
    case Code::internal:
      return "internal";
  }
  return "unknown";
}

}  // namespace kvcache
