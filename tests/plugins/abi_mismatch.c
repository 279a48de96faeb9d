/* Claims an ABI major the host does not implement. */
#include "kvcache/plugin_abi.h"

static const kvc_plugin_descriptor descriptor = {
    sizeof(kvc_plugin_descriptor), KVC_ABI_MAJOR + 98, 0, "test-abi-mismatch", "1.0.0", 0, NULL};

__attribute__((visibility("default"))) int32_t kvcache_plugin_entry(
    const kvc_host_info* host, const kvc_plugin_descriptor** out, kvc_error* err) {
  (void)host;
  (void)err;
  *out = &descriptor;
  return KVC_OK;
}
