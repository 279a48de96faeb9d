// The cpu-tbb backend: one device (this host's CPU) and paged stores in host memory.
#pragma once

#include <cstdint>
#include <optional>

#include <tbb/global_control.h>

#include "kvcache/backend.hpp"
#include "kvcache/sdk/options.hpp"

namespace kvcache::cpu {

class CpuBackend final : public Backend {
 public:
  // Options: {threads: N}, the most threads its parallel work runs on (0 or absent: all). The
  // limit is a tbb::global_control held while the backend lives, so it is process-wide (the
  // smallest of several applies): its stores and attention run their loops in the caller's
  // arena, which the backend does not own. {batch_invariant: true}: see CpuAttention.
  explicit CpuBackend(const sdk::Options& options);
  std::vector<DeviceInfo> devices() const override;
  std::unique_ptr<CacheStore> create_store(const StoreSpec& spec) override;
  std::unique_ptr<Attention> create_attention() override;

 private:
  std::uint32_t threads_ = 0;  // 0: no limit of its own
  bool batch_invariant_ = false;
  std::optional<tbb::global_control> limit_;
};

}  // namespace kvcache::cpu
