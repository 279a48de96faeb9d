/* A backend built against ABI 1.2, hand-written in C: its backend table ends before
   create_store_with, the store table it returns before format, and its capabilities before
   foreign_formats (all added in 1.3). A 1.3 host must make its stores with create_store, describe
   them from the formats embedded in kvc_store_info, and read it as running no foreign format. */
#include <stddef.h>
#include <string.h>

#include "kvcache/plugin_abi.h"

static int instance;
static int store;

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
  *count = 0;
  return KVC_OK;
}
static void destroy_store(void* self) {
  (void)self;
}
/* One page of fp16 K and int8 V tiles, 16 slots of head_dim 8. */
static int32_t info(void* self, kvc_store_info* out, kvc_error* err) {
  (void)self;
  (void)err;
  kvc_store_info i;
  memset(&i, 0, sizeof(i));
  i.struct_size = sizeof(i);
  i.page_size = 16;
  i.total_pages = 1;
  i.page_bytes = 512;
  i.k_format.struct_size = sizeof(i.k_format);
  i.k_format.code_bits = 16;
  i.k_format.tile_bytes = 256;
  i.k_format.code_bytes = 256;
  i.k_format.slot_code_bytes = 16;
  i.v_format = i.k_format;
  i.v_format.code_bits = 8;
  i.v_format.granularity = KVC_GRANULARITY_TOKEN_HEAD;
  i.v_format.slot_code_bytes = 8;
  i.v_format.slot_meta_bytes = 4;
  memcpy(out, &i, out->struct_size < sizeof(i) ? out->struct_size : sizeof(i));
  return KVC_OK;
}

/* The full table, but its size says 1.2: format is garbage the host must not call. Only destroy
   and info are implemented; a test calls nothing else. */
static kvc_store_table store_table;

static int32_t create_store(void* self, const char* spec, const kvc_store_table** table, void** out,
                            kvc_error* err) {
  (void)self, (void)spec, (void)err;
  memset(&store_table, 0, sizeof(store_table));
  store_table.struct_size = offsetof(kvc_store_table, format);
  store_table.destroy = destroy_store;
  store_table.info = info;
  store_table.format = (int32_t(*)(void*, uint32_t, kvc_format_desc*, kvc_error*))1;
  *table = &store_table;
  *out = &store;
  return KVC_OK;
}
static int32_t create_attention(void* self, const kvc_attention_table** table, void** attention,
                                kvc_error* err) {
  (void)self, (void)table, (void)attention;
  err->code = KVC_UNSUPPORTED;
  strcpy(err->message, "this test backend makes no attention");
  return KVC_UNSUPPORTED;
}
static int32_t memory_bandwidth(void* self, uint64_t bytes, double* gbps, kvc_error* err) {
  (void)self, (void)bytes, (void)err;
  *gbps = 0.0;
  return KVC_OK;
}
static int32_t device_info(void* self, uint32_t index, kvc_device_info* out, kvc_error* err) {
  (void)self, (void)index, (void)out;
  err->code = KVC_INVALID_ARGUMENT;
  strcpy(err->message, "no devices");
  return KVC_INVALID_ARGUMENT;
}

static const kvc_backend_table table = {
    offsetof(kvc_backend_table, create_store_with),
    create,
    destroy,
    device_count,
    device_info,
    create_store,
    create_attention,
    memory_bandwidth,
    (int32_t(*)(void*, const kvc_store_args*, const kvc_store_table**, void**, kvc_error*))1};

static const char* const formats[] = {"fp16", "int8-per-token"};
/* 1.2's capabilities end at device_kind; what follows is garbage the host must not read. */
static const kvc_capabilities capabilities = {offsetof(kvc_capabilities, foreign_formats),
                                              2,
                                              formats,
                                              0,
                                              NULL,
                                              0,
                                              NULL,
                                              "cpu",
                                              1,
                                              0,
                                              (const char*)1,
                                              1,
                                              7};

static const kvc_component components[1] = {{sizeof(kvc_component), KVC_KIND_BACKEND,
                                             "test-abi-1-2", "1.2.0", &capabilities, NULL, &table}};

static const kvc_plugin_descriptor descriptor = {
    sizeof(kvc_plugin_descriptor), 1, 2, "test-abi-1-2", "1.2.0", 1, components};

__attribute__((visibility("default"))) int32_t kvcache_plugin_entry(
    const kvc_host_info* host, const kvc_plugin_descriptor** out, kvc_error* err) {
  (void)host;
  (void)err;
  *out = &descriptor;
  return KVC_OK;
}
