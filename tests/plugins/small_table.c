/* A mask component whose function table is shorter than ABI 1.0 requires. */
#include "kvcache/plugin_abi.h"

static const uint32_t truncated_table[2] = {8, 0};

static const kvc_component components[1] = {
    {sizeof(kvc_component), KVC_KIND_MASK, "truncated", "1.0.0", NULL, NULL, truncated_table}};

static const kvc_plugin_descriptor descriptor = {sizeof(kvc_plugin_descriptor),
                                                 KVC_ABI_MAJOR,
                                                 KVC_ABI_MINOR,
                                                 "test-small-table",
                                                 "1.0.0",
                                                 1,
                                                 components};

__attribute__((visibility("default"))) int32_t kvcache_plugin_entry(
    const kvc_host_info* host, const kvc_plugin_descriptor** out, kvc_error* err) {
  (void)host;
  (void)err;
  *out = &descriptor;
  return KVC_OK;
}
