#include "gpu_backend.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "device_attention.hpp"
#include "device_store.hpp"
#include "gpu_runtime.hpp"
#include "kernels.hpp"
#include "kvcache/formats.hpp"

namespace kvcache::gpu {

Capabilities gpu_capabilities(const char* device_kind) {
  Capabilities c;
  c.formats = format_names();
  for (std::uint32_t d = kHeadDimStep; d <= kMaxHeadDim; d += kHeadDimStep)
    c.head_dims.push_back(d);
  c.device_kind = device_kind;
  c.query_rotation = true;
  c.engine_streams = true;
  // The staged kernel dots int8 and int4 keys with int8 queries (staged_attention.cuh): q rounded
  // per 64 elements to steps of its largest |element| / 127; float queries when scores are kept.
  c.numerics["query_rounding"] = {{"formats", {"int8-per-token", "int4-group"}},
                                  {"bits", 8},
                                  {"block", 64},
                                  {"except_with_scores", true}};
  return c;
}

GpuBackend::GpuBackend(const sdk::Options& options) {
  options.only({"device"});
  device_ = options.get<int>("device", 0);
  const int count = device_count();
  if (device_ < 0 || device_ >= count)
    throw Error(Code::invalid_argument, std::string(kVendor) + " backend: option 'device' is " +
                                            std::to_string(device_) + ", but " +
                                            std::to_string(count) + " devices exist");
}

sdk::Availability GpuBackend::availability() {
  try {
    if (device_count() == 0) return {false, std::string(kRuntime) + ": no device found"};
    return {};
  } catch (const Error& e) {
    return {false, e.what()};
  }
}

std::vector<DeviceInfo> GpuBackend::devices() const {
  std::vector<DeviceInfo> out;
  const int count = device_count();
  for (int i = 0; i < count; ++i) {
    const DeviceProperties p = device_properties(i);
    out.push_back({static_cast<std::uint32_t>(i), p.name, p.memory_bytes, true, ""});
  }
  return out;
}

std::unique_ptr<CacheStore> GpuBackend::create_store(const StoreSpec& spec) {
  return std::make_unique<DeviceStore>(spec, device_);
}

std::unique_ptr<Attention> GpuBackend::create_attention() {
  return std::make_unique<DeviceAttention>(device_);
}

std::optional<double> GpuBackend::memory_bandwidth_gbps(std::uint64_t bytes) {
  const Stream stream(device_);
  DeviceBuffer from(bytes), to(bytes);
  stream.fill(from.as<void>(), 1, bytes);
  stream.copy(to.as<void>(), from.as<void>(), bytes);  // warm-up
  stream.synchronize();
  std::vector<double> rates;
  for (int i = 0; i < 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    stream.copy(to.as<void>(), from.as<void>(), bytes);
    stream.synchronize();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    rates.push_back(2.0 * static_cast<double>(bytes) / took.count() / 1e9);
  }
  std::nth_element(rates.begin(), rates.begin() + rates.size() / 2, rates.end());
  return rates[rates.size() / 2];
}

}  // namespace kvcache::gpu
