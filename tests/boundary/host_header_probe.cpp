// Compiled as a plugin is (KVCACHE_PLUGIN_BUILD) by the ctest plugin_host_header, which expects the
// compiler to refuse it: the Cache is the host's, and a plugin that includes its header is told
// so at compile time (kvcache/host_only.hpp).
#include "kvcache/cache.hpp"
