/* Links a library that is not on any search path: dlopen fails naming it. */
#include "kvcache/plugin_abi.h"

int kvcache_test_dependency_value(void);

__attribute__((visibility("default"))) int32_t kvcache_plugin_entry(
    const kvc_host_info* host, const kvc_plugin_descriptor** out, kvc_error* err) {
  (void)host;
  (void)out;
  err->code = kvcache_test_dependency_value();
  return err->code;
}
