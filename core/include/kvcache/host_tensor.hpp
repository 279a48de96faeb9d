// A DLPack view of a row-major float32 array in host memory: what the store, the quantizers and
// attention take when the caller holds plain float buffers.
#pragma once

#include <cstdint>

#include <dlpack/dlpack.h>

namespace kvcache {

inline DLTensor host_tensor(float* data, std::int64_t* shape, int ndim = 3) {
  return DLTensor{data, {kDLCPU, 0}, ndim, {kDLFloat, 32, 1}, shape, nullptr, 0};
}

// For inputs only: DLPack has no const tensor, the callee reads it.
inline DLTensor host_tensor(const float* data, std::int64_t* shape, int ndim = 3) {
  return host_tensor(const_cast<float*>(data), shape, ndim);
}

}  // namespace kvcache
