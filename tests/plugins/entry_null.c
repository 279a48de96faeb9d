/* Reports success but returns no descriptor. */
#include "kvcache/plugin_abi.h"

__attribute__((visibility("default"))) int32_t kvcache_plugin_entry(
    const kvc_host_info* host, const kvc_plugin_descriptor** out, kvc_error* err) {
  (void)host;
  (void)err;
  *out = NULL;
  return KVC_OK;
}
