// The hip plugin: its one registration point (the implementation is backends/gpu-common).
#include "gpu_backend.hpp"
#include "kvcache/sdk/plugin.hpp"

KVCACHE_PLUGIN("hip", "0.1.0",
               kvcache::sdk::component<kvcache::gpu::GpuBackend>(
                   "hip", "0.1.0", kvcache::gpu::gpu_capabilities("hip")))
