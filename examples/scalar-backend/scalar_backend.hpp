// The backend: one device (this host's memory), stores and attention of plain loops.
#pragma once

#include "kvcache/backend.hpp"
#include "kvcache/sdk/options.hpp"

namespace scalar {

class ScalarBackend final : public kvcache::Backend {
 public:
  explicit ScalarBackend(const kvcache::sdk::Options& options) { options.only({}); }
  std::vector<kvcache::DeviceInfo> devices() const override;
  std::unique_ptr<kvcache::CacheStore> create_store(const kvcache::StoreSpec& spec) override;
  std::unique_ptr<kvcache::Attention> create_attention() override;
};

}  // namespace scalar
