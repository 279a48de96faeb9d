// What every kernel of gpu-common stands on: the vendor's device header, launches, warp
// shuffles and barriers, asynchronous copies into shared memory, and the small conversions and
// reductions the kernels share. One source for nvcc and hipcc, and for the C++ compiler over the
// CPU emulator of tests/gpu-emulator. Included by the kernels' translation unit only
// (kernels.cu).
//
// The kernels' warp is KVC_WARP lanes (32 unless the build says 64). Shuffles have that width:
// NVIDIA warps are 32; on AMD, a wave64 runs as two warps of 32 that behave alike, or, built with
// KVC_WARP=64 for CDNA, as one warp of 64. The emulator is built at both widths and the
// conformance suites run on each (tests/gpu-emulator).
#pragma once

#ifndef KVC_WARP
#define KVC_WARP 32
#endif
static_assert(KVC_WARP == 32 || KVC_WARP == 64, "KVC_WARP: 32 or 64 lanes");

#if defined(__HIPCC__) || defined(__CUDACC__)
#if defined(__HIPCC__)
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>
#define KVC_SHFL(v, lane) __shfl((v), (lane), KVC_WARP)
#define KVC_SHFL_XOR(v, mask) __shfl_xor((v), (mask), KVC_WARP)
#else
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
static_assert(KVC_WARP == 32, "NVIDIA warps have 32 lanes");
#define KVC_SHFL(v, lane) __shfl_sync(0xFFFFFFFFu, (v), (lane), 32)
#define KVC_SHFL_XOR(v, mask) __shfl_xor_sync(0xFFFFFFFFu, (v), (mask), 32)
#endif
#define KVC_LAUNCH(kernel, grid, block, stream) kernel<<<(grid), (block), 0, (stream)>>>
#define KVC_LAUNCH_SHARED(kernel, grid, block, bytes, stream) \
  kernel<<<(grid), (block), (bytes), (stream)>>>
#define KVC_DYNAMIC_SHARED(name) extern __shared__ __align__(16) std::uint8_t name[]
#define KVC_UNROLL _Pragma("unroll")
#define KVC_INLINE __device__ __forceinline__
#else
#include "emulated_device.hpp"
#define KVC_UNROLL
#define KVC_INLINE inline
#define KVC_SHFL(v, lane) ::kvcache::gpu::emu::shfl((v), (lane))
#define KVC_SHFL_XOR(v, mask) ::kvcache::gpu::emu::shfl_xor((v), (mask))
#define KVC_LAUNCH(kernel, grid, block, stream) \
  ::kvcache::gpu::emu::launch((grid), (block), (stream), kernel)
#define KVC_LAUNCH_SHARED(kernel, grid, block, bytes, stream) \
  ::kvcache::gpu::emu::launch((grid), (block), (stream), kernel, (bytes))
#define KVC_DYNAMIC_SHARED(name) std::uint8_t* const name = ::kvcache::gpu::emu::dynamic_shared()
#endif

#include <type_traits>

#include "kernels.hpp"

namespace kvcache::gpu {

constexpr std::uint32_t kWarp = KVC_WARP;
// A slot past a work item's end (kernels look up a page per slot).
constexpr std::uint32_t kNoPage = 0xFFFFFFFFu;

// Lets `kernel` take `bytes` of dynamic shared memory (above the 48 KiB a launch gets unasked).
template <class Kernel>
void allow_shared(Kernel kernel, std::uint32_t bytes) {
#if defined(__CUDACC__)
  check(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
        "allow the attention kernel its shared memory");
#elif defined(__HIPCC__)
  check(hipFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                            hipFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
        "allow the attention kernel its shared memory");
#else
  (void)kernel;
  (void)bytes;
#endif
}

// A barrier of the lanes of a warp that also orders their shared-memory accesses. On AMD and
// in the emulator, a shuffle is one (every lane takes part in it).
KVC_INLINE void sync_warp() {
#if defined(__CUDACC__)
  __syncwarp();
#else
  (void)KVC_SHFL(0u, 0);
#endif
}

// Asynchronous copies from global into shared memory (cp.async, sm_80 and later), in groups that
// a thread commits and then waits for; elsewhere plain copies, complete when issued. A warp
// reads what its lanes copied after stage_wait and sync_warp.
template <int kBytes>  // 4 or 16, the source and the target aligned to it
KVC_INLINE void stage_copy(std::uint8_t* shared, const std::uint8_t* global) {
  static_assert(kBytes == 4 || kBytes == 16);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto to = static_cast<std::uint32_t>(__cvta_generic_to_shared(shared));
  if constexpr (kBytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(to), "l"(global));
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(to), "l"(global));
#elif defined(__CUDACC__) || defined(__HIPCC__)
  using Word = std::conditional_t<kBytes == 16, uint4, std::uint32_t>;
  *reinterpret_cast<Word*>(shared) = *reinterpret_cast<const Word*>(global);
#else
  std::memcpy(shared, global, kBytes);
#endif
}

KVC_INLINE void stage_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Waits until at most `kPending` of this thread's committed groups are still in flight.
template <int kPending>
KVC_INLINE void stage_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
#endif
}

__device__ inline float load_input(const void* p, Dtype t, std::uint64_t i) {
  switch (t) {
    case Dtype::f16:
      return fp16_value(static_cast<const std::uint16_t*>(p)[i]);
    case Dtype::bf16:
      return bf16_value(static_cast<const std::uint16_t*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

__device__ inline void store_output(void* p, Dtype t, std::uint64_t i, float x) {
  switch (t) {
    case Dtype::f16:
      static_cast<std::uint16_t*>(p)[i] = fp16_bits(x);
      return;
    case Dtype::bf16:
      static_cast<std::uint16_t*>(p)[i] = bf16_bits(x);
      return;
    default:
      static_cast<float*>(p)[i] = x;
  }
}

// fp16 and fp8 with the device's conversion instructions where it has them; the same exact
// values as the codec's portable conversions, which the emulator uses.
KVC_INLINE void halves_to_floats(std::uint32_t w, float& lo, float& hi) {
#if defined(__CUDACC__) || defined(__HIPCC__)
  __half2 h;
  std::memcpy(&h, &w, 4);
  const float2 f = __half22float2(h);
  lo = f.x;
  hi = f.y;
#else
  lo = fp16_value(static_cast<std::uint16_t>(w));
  hi = fp16_value(static_cast<std::uint16_t>(w >> 16));
#endif
}

KVC_INLINE void fp8_pair_to_floats(std::uint32_t pair, float& lo, float& hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3);
  halves_to_floats(std::uint32_t{h.x} | std::uint32_t{h.y} << 16, lo, hi);
#else
  lo = fp8_value(static_cast<std::uint8_t>(pair));
  hi = fp8_value(static_cast<std::uint8_t>(pair >> 8));
#endif
}

// The four signed bytes of w as floats, exactly. On the device without a conversion instruction
// each (those run at a quarter of the float rate): byte b ^ 0x80 as the low mantissa bits of
// 2^23 is 2^23 + 128 + b.
KVC_INLINE void int8x4_to_floats(std::uint32_t w, float* x) {
#if defined(__CUDACC__)
  const std::uint32_t biased = w ^ 0x80808080u;
  KVC_UNROLL
  for (std::uint32_t e = 0; e < 4; ++e)
    x[e] = __uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7440u | e)) - 8388736.0f;
#else
  for (std::uint32_t e = 0; e < 4; ++e)
    x[e] = static_cast<float>(static_cast<std::int8_t>(w >> (8 * e)));
#endif
}

// The eight nibbles of w, low first, as floats 0..15, exactly (2^23 + n, less 2^23).
KVC_INLINE void nibbles_to_floats(std::uint32_t w, float* x) {
#if defined(__CUDACC__)
  KVC_UNROLL
  for (std::uint32_t e = 0; e < 8; ++e)
    x[e] = __uint_as_float(0x4B000000u | ((w >> (4 * e)) & 0xFu)) - 8388608.0f;
#else
  for (std::uint32_t e = 0; e < 8; ++e) x[e] = static_cast<float>((w >> (4 * e)) & 0xFu);
#endif
}

// The dot product of the four signed bytes of a and b, plus c.
KVC_INLINE std::int32_t dot4(std::uint32_t a, std::uint32_t b, std::int32_t c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 610
  return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
#else
  for (std::uint32_t i = 0; i < 4; ++i)
    c += static_cast<std::int8_t>(a >> (8 * i)) * static_cast<std::int8_t>(b >> (8 * i));
  return c;
#endif
}

// x rounded to the nearest integer, ties to even.
KVC_INLINE std::int32_t round_to_int(float x) {
#if defined(__CUDACC__) || defined(__HIPCC__)
  return __float2int_rn(x);
#else
  return static_cast<std::int32_t>(std::nearbyint(x));
#endif
}

// N 32-bit words from p, aligned to 4 * N bytes, in one load.
template <int N>
KVC_INLINE void load_words(const std::uint8_t* p, std::uint32_t* w) {
#if defined(__CUDACC__) || defined(__HIPCC__)
  if constexpr (N == 4) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
  } else if constexpr (N == 2) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    w[0] = v.x, w[1] = v.y;
  } else {
    w[0] = *reinterpret_cast<const std::uint32_t*>(p);
  }
#else
  std::memcpy(w, p, 4 * N);
#endif
}

// kCount elements from their codes in words w, low bits first, as floats (before the format's
// scale and minimum).
template <std::uint32_t kKind, std::uint32_t kCount>
KVC_INLINE void decode_codes(const std::uint32_t* w, float* x) {
  if constexpr (kCount == 1 && (kKind == kFp16 || kKind == kBf16 || kKind == kFp8E4M3)) {
    float pair[2];  // one element (a lane of a 64-lane warp at head_dim 64): a pair's low half
    decode_codes<kKind, 2>(w, pair);
    x[0] = pair[0];
  } else if constexpr (kKind == kFp16) {
    KVC_UNROLL
    for (std::uint32_t i = 0; i < kCount / 2; ++i) halves_to_floats(w[i], x[2 * i], x[2 * i + 1]);
  } else if constexpr (kKind == kBf16) {
    KVC_UNROLL
    for (std::uint32_t i = 0; i < kCount / 2; ++i) {
      x[2 * i] = bits_float(w[i] << 16);
      x[2 * i + 1] = bits_float(w[i] & 0xFFFF0000u);
    }
  } else if constexpr (kKind == kFp8E4M3) {
    KVC_UNROLL
    for (std::uint32_t i = 0; i < kCount / 2; ++i)
      fp8_pair_to_floats(w[i / 2] >> (16 * (i % 2)), x[2 * i], x[2 * i + 1]);
  } else {
    constexpr std::uint32_t kPerWord = kKind == kInt4Group ? 8 : 4;
    KVC_UNROLL
    for (std::uint32_t i = 0; i < (kCount + kPerWord - 1) / kPerWord; ++i) {
      float t[kPerWord];
      if constexpr (kKind == kInt4Group)
        nibbles_to_floats(w[i], t);
      else
        int8x4_to_floats(w[i], t);
      KVC_UNROLL
      for (std::uint32_t e = 0; e < kPerWord; ++e)
        if (i * kPerWord + e < kCount) x[i * kPerWord + e] = t[e];
    }
  }
}

// The slot of a query's j-th visible slot (spans are few: a mask answers at most a handful).
KVC_INLINE std::uint64_t visible_slot(const std::uint64_t* spans, std::uint32_t begin,
                                      std::uint32_t end, std::uint64_t j) {
  for (std::uint32_t s = begin; s < end; ++s) {
    const std::uint64_t n = spans[2 * s + 1] - spans[2 * s];
    if (j < n) return spans[2 * s] + j;
    j -= n;
  }
  return 0;  // not reached: j < the query's visible count
}

KVC_INLINE float warp_sum(float x) {
  for (std::uint32_t mask = kWarp / 2; mask > 0; mask /= 2) x += KVC_SHFL_XOR(x, mask);
  return x;
}

KVC_INLINE float warp_max(float x) {
  for (std::uint32_t mask = kWarp / 2; mask > 0; mask /= 2) {
    const float y = KVC_SHFL_XOR(x, mask);
    x = x > y ? x : y;
  }
  return x;
}

// A softmax weight in base 2, 0 for a state that has seen nothing yet (m = -inf).
KVC_INLINE float weight_of(float m, float top) {
  return m == -INFINITY ? 0.0f : exp2f(m - top);
}

}  // namespace kvcache::gpu
