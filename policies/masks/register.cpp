// The masks plugin: its one registration point.
#include "kvcache/sdk/plugin.hpp"
#include "masks.hpp"

using kvcache::sdk::component;
namespace m = kvcache::masks;

KVCACHE_PLUGIN("masks", "0.1.0", component<m::Causal>("causal", "1.0.0"),
               component<m::SlidingWindow>("sliding-window", "1.0.0"),
               component<m::SinkWindow>("sink-window", "1.0.0"),
               component<m::Chunked>("chunked", "1.0.0"),
               component<m::BlockLocal>("block-local", "1.0.0"))
