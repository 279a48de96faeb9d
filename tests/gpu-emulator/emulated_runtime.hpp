// The "emu" vendor for gpu_runtime.hpp: a CUDA-shaped runtime API over host memory, so the GPU
// backend's host code and kernels run unchanged on the CPU in the tests (kernels on fibers, see
// emulated_device.hpp). Calls complete before they return; streams and events are only handles,
// counted where the backend waits on them or records them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

// What the backend asked of the "device" since the plugin was loaded, for tests that count a
// call's launches and copies (device_tensors_test.cpp reads it by name). Data, not a function:
// a plugin exports one function, its ABI entry.
struct emuActivity {
  std::uint64_t launches, uploads, downloads, synchronizations, events;
  void* launch_stream;  // the stream of the latest launch
};
extern "C" __attribute__((visibility("default"))) emuActivity kvcache_emulator_activity;

enum emuError_t { emuSuccess = 0, emuErrorInvalidValue = 1, emuErrorMemoryAllocation = 2 };
enum emuMemcpyKind { emuMemcpyHostToDevice, emuMemcpyDeviceToHost, emuMemcpyDeviceToDevice };
using emuStream_t = void*;
using emuEvent_t = void*;
inline constexpr unsigned emuStreamNonBlocking = 1;

struct emuDeviceProp {
  char name[256];
  std::size_t totalGlobalMem;
  int multiProcessorCount;
};

inline const char* emuGetErrorString(emuError_t e) {
  return e == emuSuccess                 ? "no error"
         : e == emuErrorMemoryAllocation ? "out of memory"
                                         : "invalid value";
}
inline emuError_t emuGetLastError() {
  return emuSuccess;
}
inline emuError_t emuGetDeviceCount(int* count) {
  *count = 1;
  return emuSuccess;
}
inline emuError_t emuGetDeviceProperties(emuDeviceProp* p, int device) {
  if (device != 0) return emuErrorInvalidValue;
  std::strcpy(p->name, "kvcache GPU emulator (kernels on CPU fibers)");
  p->totalGlobalMem = std::size_t{1} << 30;
  p->multiProcessorCount = 2;  // small, so that long sequences are split and merged
  return emuSuccess;
}
inline emuError_t emuGetDevice(int* device) {
  *device = 0;
  return emuSuccess;
}
inline emuError_t emuSetDevice(int device) {
  return device == 0 ? emuSuccess : emuErrorInvalidValue;
}
inline emuError_t emuMalloc(void** p, std::size_t bytes) {
  *p = std::malloc(bytes == 0 ? 1 : bytes);
  return *p != nullptr ? emuSuccess : emuErrorMemoryAllocation;
}
inline emuError_t emuFree(void* p) {
  std::free(p);
  return emuSuccess;
}
inline emuError_t emuMallocHost(void** p, std::size_t bytes) {
  return emuMalloc(p, bytes);
}
inline emuError_t emuFreeHost(void* p) {
  return emuFree(p);
}
inline emuError_t emuMemcpyAsync(void* to, const void* from, std::size_t bytes, emuMemcpyKind kind,
                                 emuStream_t) {
  kvcache_emulator_activity.uploads += kind == emuMemcpyHostToDevice;
  kvcache_emulator_activity.downloads += kind == emuMemcpyDeviceToHost;
  std::memmove(to, from, bytes);
  return emuSuccess;
}
inline emuError_t emuMemsetAsync(void* p, int byte, std::size_t bytes, emuStream_t) {
  std::memset(p, byte, bytes);
  return emuSuccess;
}
inline emuError_t emuStreamCreateWithFlags(emuStream_t* s, unsigned) {
  *s = std::malloc(1);  // a handle of its own, told apart from an engine's in launch_stream
  return *s != nullptr ? emuSuccess : emuErrorMemoryAllocation;
}
inline emuError_t emuStreamDestroy(emuStream_t s) {
  std::free(s);
  return emuSuccess;
}
inline emuError_t emuStreamSynchronize(emuStream_t) {
  ++kvcache_emulator_activity.synchronizations;
  return emuSuccess;
}
inline emuError_t emuEventRecord(emuEvent_t event, emuStream_t) {
  if (event == nullptr) return emuErrorInvalidValue;
  ++kvcache_emulator_activity.events;
  return emuSuccess;
}
inline emuError_t emuMallocAsync(void** p, std::size_t bytes, emuStream_t) {
  return emuMalloc(p, bytes);
}
inline emuError_t emuFreeAsync(void* p, emuStream_t) {
  return emuFree(p);
}
