// The cuda plugin: its one registration point (the implementation is backends/gpu-common).
#include "gpu_backend.hpp"
#include "kvcache/sdk/plugin.hpp"

KVCACHE_PLUGIN("cuda", "0.1.0",
               kvcache::sdk::component<kvcache::gpu::GpuBackend>(
                   "cuda", "0.1.0", kvcache::gpu::gpu_capabilities("cuda")))
