// A test-only backend: gpu-common's host code and kernels compiled as plain C++ over the CPU
// emulator, so the conformance suites check the GPU backends' logic on machines without a GPU.
#include "gpu_backend.hpp"
#include "kvcache/sdk/plugin.hpp"

// KVCACHE_GPU_EMULATED_NAME: "gpu-emulated" (warps of 32) or "gpu-emulated-wave64" (of 64).
KVCACHE_PLUGIN(KVCACHE_GPU_EMULATED_NAME, "0.1.0",
               kvcache::sdk::component<kvcache::gpu::GpuBackend>(
                   KVCACHE_GPU_EMULATED_NAME, "0.1.0",
                   kvcache::gpu::gpu_capabilities(KVCACHE_GPU_EMULATED_NAME)))
