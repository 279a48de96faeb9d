// The vendor shim on the host side: one spelling for the CUDA and HIP runtime APIs, so the GPU
// backend's host code is written once and compiled twice (KVCACHE_GPU_CUDA or KVCACHE_GPU_HIP).
// GPU(Malloc) is cudaMalloc or hipMalloc, GPU(Stream_t) is cudaStream_t or hipStream_t, and so on.
// Only the runtime API is used, never the driver API (a stray -lcuda links against the stub and
// fails at load time on a machine without a driver).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#if defined(KVCACHE_GPU_CUDA)
#include <cuda_runtime_api.h>
#define GPU(name) cuda##name
#elif defined(KVCACHE_GPU_HIP)
#include <hip/hip_runtime_api.h>
#define GPU(name) hip##name
#elif defined(KVCACHE_GPU_EMULATED)
#include "emulated_runtime.hpp"  // tests/gpu-emulator: this code on the CPU, in the tests
#define GPU(name) emu##name
#else
#error "define KVCACHE_GPU_CUDA, KVCACHE_GPU_HIP or (in the tests) KVCACHE_GPU_EMULATED"
#endif

#include <dlpack/dlpack.h>

#include "kvcache/engine_stream.hpp"
#include "kvcache/status.hpp"

namespace kvcache::gpu {

// DLPack's names for the vendor's device memory and its page-locked host memory. The tests'
// emulator: its "device" memory is host memory, tagged as an extension device.
#if defined(KVCACHE_GPU_CUDA)
inline constexpr DLDeviceType kDeviceType = kDLCUDA, kHostDeviceType = kDLCUDAHost;
#elif defined(KVCACHE_GPU_HIP)
inline constexpr DLDeviceType kDeviceType = kDLROCM, kHostDeviceType = kDLROCMHost;
#else
inline constexpr DLDeviceType kDeviceType = kDLExtDev, kHostDeviceType = kDLCPU;
#endif

#if defined(KVCACHE_GPU_CUDA)
inline constexpr const char* kVendor = "cuda";
inline constexpr const char* kRuntime = "CUDA runtime";
#elif defined(KVCACHE_GPU_HIP)
inline constexpr const char* kVendor = "hip";
inline constexpr const char* kRuntime = "HIP runtime";
#else
inline constexpr const char* kVendor = "gpu-emulated";
inline constexpr const char* kRuntime = "GPU emulator";
#endif

// "<runtime>: <what>: <error text> (error N)"
inline std::string runtime_error_text(GPU(Error_t) status, const std::string& what) {
  return std::string(kRuntime) + ": " + what + ": " + GPU(GetErrorString)(status) + " (error " +
         std::to_string(static_cast<int>(status)) + ")";
}

inline void check(GPU(Error_t) status, const char* what) {
  if (status == GPU(Success)) return;
  const Code code = status == GPU(ErrorMemoryAllocation) ? Code::out_of_memory : Code::internal;
  throw Error(code, runtime_error_text(status, what));
}

// Devices the runtime sees; throws Error(unavailable) with the runtime's reason when it cannot
// tell (no driver, no device node).
inline int device_count() {
  int count = 0;  // left untouched by a failing call
  const GPU(Error_t) status = GPU(GetDeviceCount)(&count);
  if (status != GPU(Success))
    throw Error(Code::unavailable, runtime_error_text(status, "count devices"));
  return count;
}

struct DeviceProperties {
  std::string name;
  std::uint64_t memory_bytes = 0;
  int processors = 1;  // streaming multiprocessors / compute units
};

inline DeviceProperties device_properties(int device) {
#if defined(KVCACHE_GPU_CUDA)
  cudaDeviceProp p{};
#elif defined(KVCACHE_GPU_HIP)
  hipDeviceProp_t p{};
#else
  emuDeviceProp p{};
#endif
  check(GPU(GetDeviceProperties)(&p, device), "read device properties");
  return {p.name, static_cast<std::uint64_t>(p.totalGlobalMem), p.multiProcessorCount};
}

// Device memory owned by one object; grows on demand (for scratch and staging).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) { reserve(bytes); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  ~DeviceBuffer() {
    if (data_ != nullptr) (void)GPU(Free)(data_);
  }

  // At least `bytes` of device memory; old contents are not kept.
  void* reserve(std::size_t bytes) {
    if (bytes <= bytes_) return data_;
    if (data_ != nullptr) check(GPU(Free)(data_), "free");
    data_ = nullptr;
    bytes_ = 0;
    check(GPU(Malloc)(&data_, bytes), ("allocate " + std::to_string(bytes) + " bytes").c_str());
    bytes_ = bytes;
    return data_;
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  std::size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// Page-locked host memory owned by one object; grows on demand, old contents not kept. Copies
// between it and the device are asynchronous; from pageable memory the runtime first stages them
// through page-locked memory of its own, as a copy the caller waits for.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { release(); }

  std::uint8_t* reserve(std::size_t bytes) {
    if (bytes <= bytes_) return data_;
    release();
    void* p = nullptr;
#if defined(KVCACHE_GPU_HIP)
    check(hipHostMalloc(&p, bytes, hipHostMallocDefault), "allocate page-locked host memory");
#else
    check(GPU(MallocHost)(&p, bytes), "allocate page-locked host memory");
#endif
    data_ = static_cast<std::uint8_t*>(p);
    bytes_ = bytes;
    return data_;
  }

 private:
  void release() {
#if defined(KVCACHE_GPU_HIP)
    if (data_ != nullptr) (void)hipHostFree(data_);
#else
    if (data_ != nullptr) (void)GPU(FreeHost)(data_);
#endif
    data_ = nullptr;
    bytes_ = 0;
  }
  std::uint8_t* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// A stream to enqueue on, on a chosen device: a store's own (Stream) or an engine's.
class StreamView {
 public:
  StreamView(int device, GPU(Stream_t) stream) : device_(device), stream_(stream) {}
  GPU(Stream_t) get() const { return stream_; }
  int device() const { return device_; }
  // Makes this stream's device current for the calling thread (runtime calls are per thread).
  void activate() const { check(GPU(SetDevice)(device_), "select device"); }
  void synchronize() const { check(GPU(StreamSynchronize)(stream_), "synchronize"); }
  // Records an engine's event (a cudaEvent_t or hipEvent_t) after the work enqueued so far.
  void record(void* event) const {
    check(GPU(EventRecord)(static_cast<GPU(Event_t)>(event), stream_), "record the event");
  }
  void upload(void* device, const void* host, std::size_t bytes) const {
    if (bytes == 0) return;
    check(GPU(MemcpyAsync)(device, host, bytes, GPU(MemcpyHostToDevice), stream_),
          "copy to device");
  }
  void download(void* host, const void* device, std::size_t bytes) const {
    if (bytes == 0) return;
    check(GPU(MemcpyAsync)(host, device, bytes, GPU(MemcpyDeviceToHost), stream_), "copy to host");
  }
  void copy(void* to, const void* from, std::size_t bytes) const {
    if (bytes == 0) return;
    check(GPU(MemcpyAsync)(to, from, bytes, GPU(MemcpyDeviceToDevice), stream_), "copy on device");
  }
  void fill(void* device, int byte, std::size_t bytes) const {
    check(GPU(MemsetAsync)(device, byte, bytes, stream_), "fill");
  }

 protected:
  int device_;
  GPU(Stream_t) stream_{};
};

// A stream of its own per store, on a chosen device.
class Stream : public StreamView {
 public:
  explicit Stream(int device) : StreamView(device, {}) {
    activate();
    check(GPU(StreamCreateWithFlags)(&stream_, GPU(StreamNonBlocking)), "create stream");
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() { (void)GPU(StreamDestroy)(stream_); }
};

// Work left on an engine's stream that nobody has waited for. A store's pools and staging and an
// attention's scratch serve every stream in turn, and only one stream orders its own work: before
// they serve another stream, the one with work left is waited for. Its own lock: readers of a
// store enter it under a shared lock.
class StreamOrder {
 public:
  // The stream for a call: the engine's, or `own`.
  StreamView enter(const StreamView& own, std::optional<EngineStream> engine) {
    const std::lock_guard lock(mutex_);
    const StreamView next =
        engine ? StreamView(own.device(), static_cast<GPU(Stream_t)>(engine->handle)) : own;
    if (pending_ && *pending_ != next.get()) {
      StreamView(own.device(), *pending_).synchronize();
      pending_.reset();
    }
    if (engine) pending_ = next.get();
    return next;
  }
  // `stream` was waited for.
  void waited(GPU(Stream_t) stream) {
    const std::lock_guard lock(mutex_);
    if (pending_ == stream) pending_.reset();
  }

 private:
  std::mutex mutex_;
  std::optional<GPU(Stream_t)> pending_;
};

// Device memory allocated and freed in the order of one stream: freed after the work enqueued
// before, with no wait (a step's plan, dropped while the engine's stream may still read it).
// Where the device has no stream-ordered pool, plain memory, whose free waits for the device.
class StreamBuffer {
 public:
  StreamBuffer(std::size_t bytes, const StreamView& stream) : stream_(stream.get()) {
    if (GPU(MallocAsync)(&data_, bytes, stream_) == GPU(Success)) return;
    (void)GPU(GetLastError)();  // the refusal is not sticky: clear it
    ordered_ = false;
    check(GPU(Malloc)(&data_, bytes), ("allocate " + std::to_string(bytes) + " bytes").c_str());
  }
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  ~StreamBuffer() { (void)(ordered_ ? GPU(FreeAsync)(data_, stream_) : GPU(Free)(data_)); }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  GPU(Stream_t) stream_;
  void* data_ = nullptr;
  bool ordered_ = true;
};

}  // namespace kvcache::gpu
