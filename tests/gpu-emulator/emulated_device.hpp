// Device builtins for kernels.cu compiled as plain C++ in the tests: each block's threads run as
// fibers on the launching thread, switching at __syncthreads and at warp shuffles (warps of
// KVC_WARP lanes: 32, or 64 as on AMD's CDNA), which is all the synchronisation the kernels use.
// Blocks run one after another (in a shuffled order), so shared memory is thread_local and atomics
// are plain additions.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>

#define __global__
#define __device__
#define __host__
#define __launch_bounds__(...)
#define __align__(n)
#define __shared__ static thread_local
#define __syncthreads() ::kvcache::gpu::emu::sync_block()
#define __threadfence() ((void)0)  // blocks run one after another: their writes are in order

namespace kvcache::gpu {

struct dim3 {
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
  unsigned x, y, z;
};

extern thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;

template <class T>
T atomicAdd(T* p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}

namespace emu {

void sync_block();
// The 32 bits lane `source` of this warp passes (every lane of the warp takes part).
std::uint32_t shfl_bits(std::uint32_t bits, unsigned source);
unsigned lane_in_warp();

// The value of lane `source`, or of lane (this lane ^ mask), of this warp.
template <class T>
T shfl(T v, unsigned source) {
  static_assert(sizeof(T) == 4);
  std::uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits = shfl_bits(bits, source);
  std::memcpy(&v, &bits, 4);
  return v;
}
template <class T>
T shfl_xor(T v, unsigned mask) {
  return shfl(v, lane_in_warp() ^ mask);
}
// Runs `body` for every thread of every block of the grid, each block with `shared_bytes` of
// dynamic shared memory (16-byte aligned).
// `stream` is only recorded (emuActivity::launch_stream): every launch completes before it returns.
void run(dim3 grid, dim3 block, std::size_t shared_bytes, void* stream,
         const std::function<void()>& body);
// The running block's dynamic shared memory.
std::uint8_t* dynamic_shared();

// kernel<<<grid, block, bytes, stream>>>(args...) is launch(grid, block, stream, kernel,
// bytes)(args...).
template <class... P>
auto launch(dim3 grid, dim3 block, void* stream, void (*kernel)(P...),
            std::size_t shared_bytes = 0) {
  return [=](auto... args) { run(grid, block, shared_bytes, stream, [&] { kernel(args...); }); };
}

}  // namespace emu
}  // namespace kvcache::gpu
