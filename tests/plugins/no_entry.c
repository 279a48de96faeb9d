/* A valid shared object that exports something, but not kvcache_plugin_entry. */
__attribute__((visibility("default"))) int kvcache_plugin_entri(void) {
  return 0;
}
