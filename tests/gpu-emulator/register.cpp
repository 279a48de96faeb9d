// A test-only backend: gpu-common's host code and kernels compiled as plain C++ over the CPU
// emulator, so the conformance suites check the GPU backends' logic on machines without a GPU.
#include "gpu_backend.hpp"
#include "kvcache/sdk/plugin.hpp"

KVCACHE_PLUGIN("gpu-emulated", "0.1.0",
               kvcache::sdk::component<kvcache::gpu::GpuBackend>(
                   "gpu-emulated", "0.1.0", kvcache::gpu::gpu_capabilities("gpu-emulated")))
