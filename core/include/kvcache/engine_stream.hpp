// The engine's stream: where a GPU backend enqueues a step's work, so that it runs in order with
// the engine's own kernels and the host waits for it at most once per step (docs/engine-step.md,
// "Streams"). Only backends that declare Capabilities::engine_streams take one.
#pragma once

namespace kvcache {

// A cudaStream_t or hipStream_t, as the vendor's runtime made it; null is the vendor's default
// stream (the legacy one on CUDA), which is a stream like any other here.
struct EngineStream {
  void* handle = nullptr;
};

}  // namespace kvcache
