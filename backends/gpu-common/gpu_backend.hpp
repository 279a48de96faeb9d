// The GPU backend (CUDA or HIP, by how it was compiled): its devices, whether it can run here
// (the runtime's own reason when not), and its stores and attention on one chosen device.
#pragma once

#include <cstdint>
#include <vector>

#include "kvcache/backend.hpp"
#include "kvcache/sdk/options.hpp"
#include "kvcache/sdk/plugin.hpp"

namespace kvcache::gpu {

// What the GPU plugins declare (one source for cuda, hip and the emulator): every built-in format
// by fused kernels, the head dimensions the kernels read (multiples of kHeadDimStep up to
// kMaxHeadDim), any page size, and query rotations.
Capabilities gpu_capabilities(const char* device_kind);

class GpuBackend final : public Backend {
 public:
  // Options: {device: N}, default 0.
  explicit GpuBackend(const sdk::Options& options);
  // Unavailable with the runtime's reason (no driver, no device) on a host without a GPU.
  static sdk::Availability availability();
  std::vector<DeviceInfo> devices() const override;
  std::unique_ptr<CacheStore> create_store(const StoreSpec& spec) override;
  std::unique_ptr<Attention> create_attention() override;
  // Device-to-device copies of `bytes`, the median of five, reads and writes counted.
  std::optional<double> memory_bandwidth_gbps(std::uint64_t bytes) override;

 private:
  int device_ = 0;
};

}  // namespace kvcache::gpu
