/* An eviction policy built against ABI 1.1, hand-written in C: its table ends where 1.1's did,
   before drops_tokens (added in 1.2). A newer host must load it, never read past its end, and
   treat whether it drops tokens as not declared. */
#include <stddef.h>

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
static int32_t wants_scores(void* self, uint32_t* out, kvc_error* err) {
  (void)self;
  (void)err;
  *out = 0;
  return KVC_OK;
}
/* Never anything to evict: an empty plan. */
static int32_t after_step(void* self, const kvc_cache_state* state, kvc_plan_builder* plan,
                          kvc_error* err) {
  (void)self, (void)state, (void)plan, (void)err;
  return KVC_OK;
}
static int32_t on_pressure(void* self, const kvc_cache_state* state, uint64_t pages_needed,
                           kvc_plan_builder* plan, kvc_error* err) {
  (void)self, (void)state, (void)pages_needed, (void)plan, (void)err;
  return KVC_OK;
}

/* The full struct, but its size says 1.1: the last field is garbage the host must not call. */
static const kvc_eviction_table table = {offsetof(kvc_eviction_table, drops_tokens),
                                         create,
                                         destroy,
                                         wants_scores,
                                         after_step,
                                         on_pressure,
                                         (int32_t(*)(void*, uint32_t*, kvc_error*))1};

static const kvc_component components[1] = {
    {sizeof(kvc_component), KVC_KIND_EVICTION, "test-abi-1-1", "1.0.0", NULL, NULL, &table}};

static const kvc_plugin_descriptor descriptor = {
    sizeof(kvc_plugin_descriptor), 1, 1, "test-abi-1-1", "1.0.0", 1, components};

__attribute__((visibility("default"))) int32_t kvcache_plugin_entry(
    const kvc_host_info* host, const kvc_plugin_descriptor** out, kvc_error* err) {
  (void)host;
  (void)err;
  *out = &descriptor;
  return KVC_OK;
}
