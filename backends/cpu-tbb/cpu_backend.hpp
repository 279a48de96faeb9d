// The cpu-tbb backend: one device (this host's CPU) and paged stores in host memory.
#pragma once

#include "kvcache/backend.hpp"
#include "kvcache/sdk/options.hpp"

namespace kvcache::cpu {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const sdk::Options& options);
  std::vector<DeviceInfo> devices() const override;
  std::unique_ptr<CacheStore> create_store(const StoreSpec& spec) override;
  std::unique_ptr<Attention> create_attention() override;
};

}  // namespace kvcache::cpu
