/* The dependency that the missing-dependency plugin cannot find at load time. */
__attribute__((visibility("default"))) int kvcache_test_dependency_value(void) {
  return 42;
}
