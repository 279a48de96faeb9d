// The memcached plugin: one transport component.
#include "kvcache/sdk/plugin.hpp"
#include "memcached_transport.hpp"

KVCACHE_PLUGIN("memcached", "0.1.0",
               kvcache::sdk::component<kvcache::memcached::MemcachedTransport>("memcached",
                                                                               "0.1.0"))
