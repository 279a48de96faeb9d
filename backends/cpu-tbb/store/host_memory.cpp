#include "store/host_memory.hpp"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "kvcache/status.hpp"

namespace kvcache::cpu {
namespace {

std::string gib(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f GiB", static_cast<double>(bytes) / (1u << 30));
  return text;
}

}  // namespace

std::uint64_t available_host_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::uint64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  const long pages = sysconf(_SC_AVPHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? static_cast<std::uint64_t>(pages) * page_size : 0;
}

const StoreSpec& fits_host_memory(const StoreSpec& spec) {
  const std::uint64_t available = available_host_bytes();
  if (available != 0 && spec.capacity_bytes > available)
    throw Error(Code::out_of_memory,
                "cannot allocate the pool: its capacity of " + gib(spec.capacity_bytes) +
                    " exceeds the " + gib(available) +
                    " of memory this host has available (lower cache.capacity)");
  return spec;
}

}  // namespace kvcache::cpu
