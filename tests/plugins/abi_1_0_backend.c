/* A backend built against ABI 1.0, hand-written in C: its table ends where 1.0's did, before
   memory_bandwidth (added in 1.1). A newer host must load it and never read past its end. */
#include <stddef.h>
#include <string.h>

#include "kvcache/plugin_abi.h"

static int instance;

static int32_t create(const char* options_json, void** out, kvc_error* err) {
  (void)options_json;
  (void)err;
  *out = &instance;
  return KVC_OK;
}
static void destroy(void* self) {
  (void)self;
}
static int32_t device_count(void* self, uint32_t* count, kvc_error* err) {
  (void)self;
  (void)err;
  *count = 1;
  return KVC_OK;
}
static int32_t device_info(void* self, uint32_t index, kvc_device_info* out, kvc_error* err) {
  (void)self;
  (void)err;
  memset(out, 0, sizeof(*out));
  out->struct_size = sizeof(*out);
  out->index = index;
  out->available = 1;
  strcpy(out->name, "ABI 1.0 device");
  return KVC_OK;
}
static int32_t create_store(void* self, const char* spec, const kvc_store_table** table,
                            void** store, kvc_error* err) {
  (void)self, (void)spec, (void)table, (void)store;
  err->code = KVC_UNSUPPORTED;
  strcpy(err->message, "this test backend makes no stores");
  return KVC_UNSUPPORTED;
}
static int32_t create_attention(void* self, const kvc_attention_table** table, void** attention,
                                kvc_error* err) {
  (void)self, (void)table, (void)attention;
  err->code = KVC_UNSUPPORTED;
  strcpy(err->message, "this test backend makes no attention");
  return KVC_UNSUPPORTED;
}

/* The full struct, but its size says 1.0: the later fields are garbage the host must not call. */
static const kvc_backend_table table = {
    offsetof(kvc_backend_table, memory_bandwidth),
    create,
    destroy,
    device_count,
    device_info,
    create_store,
    create_attention,
    (int32_t(*)(void*, uint64_t, double*, kvc_error*))1,
    (int32_t(*)(void*, const kvc_store_args*, const kvc_store_table**, void**, kvc_error*))1};

static const kvc_component components[1] = {
    {sizeof(kvc_component), KVC_KIND_BACKEND, "test-abi-1-0", "1.0.0", NULL, NULL, &table}};

static const kvc_plugin_descriptor descriptor = {
    sizeof(kvc_plugin_descriptor), 1, 0, "test-abi-1-0", "1.0.0", 1, components};

__attribute__((visibility("default"))) int32_t kvcache_plugin_entry(
    const kvc_host_info* host, const kvc_plugin_descriptor** out, kvc_error* err) {
  (void)host;
  (void)err;
  *out = &descriptor;
  return KVC_OK;
}
