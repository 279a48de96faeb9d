// Backend: what a device plugin provides. A backend that cannot run here (a CUDA plugin on a host
// without a GPU) still loads and says why through its component's availability.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvcache/attention.hpp"
#include "kvcache/cache_store.hpp"

namespace kvcache {

struct DeviceInfo {
  std::uint32_t index = 0;
  std::string name;
  std::uint64_t memory_bytes = 0;
  bool available = false;
  std::string reason;  // why not available
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::vector<DeviceInfo> devices() const = 0;
  // A store whose pools are allocated once, here, from spec.capacity_bytes.
  virtual std::unique_ptr<CacheStore> create_store(const StoreSpec& spec) = 0;
  // Attention over this backend's stores.
  virtual std::unique_ptr<Attention> create_attention() = 0;
  // GB/s of the memory this backend's stores live in, measured now by copying `bytes` within it
  // (reads and writes both counted); nullopt when that is host memory, which callers measure
  // themselves. Benchmarks report attention as a fraction of it.
  virtual std::optional<double> memory_bandwidth_gbps(std::uint64_t /*bytes*/) {
    return std::nullopt;
  }
};

}  // namespace kvcache
