/* A backend whose attention is of ABI 1.3: its table ends before plan, run and destroy_plan. It
 * is cpu-tbb (loaded from the build tree) with the attention table cut at the 1.3 size, so a step
 * through it must plan on the host and run cpu-tbb's per-layer decode and prefill. */
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "kvcache/plugin_abi.h"

static const kvc_backend_table* inner;
static kvc_backend_table table;
static kvc_attention_table attention_table;
static kvc_component component;
static kvc_plugin_descriptor descriptor;

static int32_t create_attention(void* self, const kvc_attention_table** out, void** attention,
                                kvc_error* err) {
  const kvc_attention_table* full = NULL;
  const int32_t rc = inner->create_attention(self, &full, attention, err);
  if (rc != KVC_OK) return rc;
  memcpy(&attention_table, full, offsetof(kvc_attention_table, plan));
  attention_table.struct_size = offsetof(kvc_attention_table, plan);
  *out = &attention_table;
  return KVC_OK;
}

static int32_t fail(kvc_error* err, const char* what) {
  err->code = KVC_UNAVAILABLE;
  snprintf(err->message, KVC_MESSAGE_CAPACITY, "%s", what);
  return KVC_UNAVAILABLE;
}

__attribute__((visibility("default"))) int32_t kvcache_plugin_entry(
    const kvc_host_info* host, const kvc_plugin_descriptor** out, kvc_error* err) {
  void* library = dlopen(KVCACHE_CPU_TBB_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  if (library == NULL) return fail(err, dlerror());
  void* symbol = dlsym(library, KVC_ENTRY_SYMBOL);
  if (symbol == NULL) return fail(err, "cpu-tbb has no entry");
  kvc_plugin_entry_fn entry;
  memcpy(&entry, &symbol,
         sizeof entry); /* POSIX: a data pointer to a function (ISO C has no cast) */
  const kvc_plugin_descriptor* cpu = NULL;
  const int32_t rc = entry(host, &cpu, err);
  if (rc != KVC_OK) return rc;
  for (uint32_t i = 0; i < cpu->n_components; ++i) {
    if (cpu->components[i].kind != KVC_KIND_BACKEND) continue;
    component = cpu->components[i];
    inner = (const kvc_backend_table*)component.table;
  }
  if (inner == NULL) return fail(err, "cpu-tbb has no backend");
  table = *inner;
  table.create_attention = create_attention;
  component.name = "test-abi-1-3-attention";
  component.table = &table;
  descriptor = *cpu;
  descriptor.abi_minor = 3;
  descriptor.name = "test-abi-1-3-attention";
  descriptor.n_components = 1;
  descriptor.components = &component;
  *out = &descriptor;
  return KVC_OK;
}
