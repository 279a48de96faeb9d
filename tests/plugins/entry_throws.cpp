// An entry that lets a C++ exception escape, breaking the contract.
#include <stdexcept>

#include "kvcache/plugin_abi.h"

extern "C" __attribute__((visibility("default"))) int32_t kvcache_plugin_entry(
    const kvc_host_info*, const kvc_plugin_descriptor**, kvc_error*) {
  throw std::runtime_error("boom: plugin initialisation failed");
}
