// The cpu-tbb plugin: its one registration point.
#include "cpu_backend.hpp"
#include "kvcache/formats.hpp"
#include "kvcache/sdk/plugin.hpp"
#include "numerics.hpp"

KVCACHE_PLUGIN(
    "cpu-tbb", "0.1.0",
    kvcache::sdk::component<kvcache::cpu::CpuBackend>(
        "cpu-tbb", "0.1.0",
        {kvcache::format_names(), {}, {}, "cpu", true, kvcache::cpu::attention_numerics(), true}))
