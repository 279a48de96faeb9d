#include "scalar_backend.hpp"

#include <unistd.h>

#include "host_store.hpp"
#include "scalar_attention.hpp"

namespace scalar {

std::vector<kvcache::DeviceInfo> ScalarBackend::devices() const {
  const auto bytes = static_cast<std::uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                     static_cast<std::uint64_t>(sysconf(_SC_PAGE_SIZE));
  return {{0, "host memory (scalar loops)", bytes, true, ""}};
}

std::unique_ptr<kvcache::CacheStore> ScalarBackend::create_store(const kvcache::StoreSpec& spec) {
  return std::make_unique<HostStore>(spec);
}

std::unique_ptr<kvcache::Attention> ScalarBackend::create_attention() {
  return std::make_unique<ScalarAttention>();
}

}  // namespace scalar
