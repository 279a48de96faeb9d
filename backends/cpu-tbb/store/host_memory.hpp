// How much host memory a store may take. The pools are committed when the store is created
// (every page touched), so a pool larger than the memory the host has available would not fail
// cleanly later: the kernel's out-of-memory killer would end the process. It is refused first.
#pragma once

#include <cstdint>

#include "kvcache/cache_store.hpp"

namespace kvcache::cpu {

// The host's available memory (Linux: MemAvailable), or 0 when it cannot be read.
std::uint64_t available_host_bytes();

// The spec, unless its capacity exceeds the available memory: then Error(out_of_memory) saying
// both sizes, before anything is allocated.
const StoreSpec& fits_host_memory(const StoreSpec& spec);

}  // namespace kvcache::cpu
