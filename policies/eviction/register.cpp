// The eviction plugin: its one registration point.
#include "kvcache/sdk/plugin.hpp"
#include "policies.hpp"

using kvcache::sdk::component;
namespace e = kvcache::eviction;

KVCACHE_PLUGIN("eviction", "0.1.0", component<e::OldestFirst>("oldest-first", "1.0.0"),
               component<e::LeastRecentlyUsed>("lru", "1.0.0"),
               component<e::Priority>("priority", "1.0.0"),
               component<e::Streaming>("streaming", "1.0.0"),
               component<e::HeavyHitter>("heavy-hitter", "1.0.0"))
