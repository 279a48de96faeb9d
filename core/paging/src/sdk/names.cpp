#include "kvcache/types.hpp"

namespace kvcache {

std::string_view kind_name(ComponentKind kind) noexcept {
  switch (kind) {
    case ComponentKind::backend:
      return "backend";
    case ComponentKind::quantizer:
      return "quantizer";
    case ComponentKind::mask:
      return "mask";
    case ComponentKind::eviction:
      return "eviction";
    case ComponentKind::transport:
      return "transport";
  }
  return "unknown";
}

}  // namespace kvcache
