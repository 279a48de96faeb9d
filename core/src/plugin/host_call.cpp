#include "plugin/host_call.hpp"

#include <cstring>

namespace kvcache::plugin {

std::string message_of(const kvc_error& err) {
  return std::string(err.message, strnlen(err.message, sizeof(err.message)));
}

void throw_if_failed(int32_t rc, const kvc_error& err, const std::string& who) {
  if (rc == KVC_OK) return;
  const Code code =
      (rc >= KVC_INVALID_ARGUMENT && rc <= KVC_INTERNAL) ? static_cast<Code>(rc) : Code::internal;
  throw Error(code, who + ": " + message_of(err));
}

}  // namespace kvcache::plugin
