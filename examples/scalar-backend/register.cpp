// The plugin's one registration point: a backend named "scalar" that runs every built-in format
// and, through their components' own codecs, any format from outside (foreign_formats).
#include "kvcache/formats.hpp"
#include "kvcache/sdk/plugin.hpp"
#include "scalar_backend.hpp"

KVCACHE_PLUGIN("scalar-backend", "0.1.0",
               kvcache::sdk::component<scalar::ScalarBackend>(
                   "scalar", "0.1.0", {kvcache::format_names(), {}, {}, "cpu", true}))
