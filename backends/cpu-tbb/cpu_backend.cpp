#include "cpu_backend.hpp"

#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#include "attention/cpu_attention.hpp"
#include "kernels/cpu_features.hpp"
#include "store/paged_store.hpp"

namespace kvcache::cpu {
namespace {

std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "CPU";
}

}  // namespace

CpuBackend::CpuBackend(const sdk::Options& options) {
  options.only({"threads", "batch_invariant"});
  threads_ = options.get<std::uint32_t>("threads", 0);
  batch_invariant_ = options.get<bool>("batch_invariant", false);
  if (threads_ != 0) limit_.emplace(tbb::global_control::max_allowed_parallelism, threads_);
}

std::vector<DeviceInfo> CpuBackend::devices() const {
  const auto pages = static_cast<std::uint64_t>(sysconf(_SC_PHYS_PAGES));
  const auto page_size = static_cast<std::uint64_t>(sysconf(_SC_PAGE_SIZE));
  // The threads it may run on: its own limit when below the host's.
  const unsigned all = std::thread::hardware_concurrency();
  const unsigned threads = threads_ != 0 && (all == 0 || threads_ < all) ? threads_ : all;
  return {
      {0,
       cpu_model() + " (" + std::to_string(threads) + " threads, " + kernel_family() + " kernels)",
       pages * page_size, true, ""}};
}

std::unique_ptr<CacheStore> CpuBackend::create_store(const StoreSpec& spec) {
  return std::make_unique<PagedStore>(spec);
}

}  // namespace kvcache::cpu

namespace kvcache::cpu {

std::unique_ptr<Attention> CpuBackend::create_attention() {
  return std::make_unique<CpuAttention>(batch_invariant_);
}

}  // namespace kvcache::cpu
