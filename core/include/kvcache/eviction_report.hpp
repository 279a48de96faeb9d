// What left the cache, reported to the engine so it can recompute it: nothing leaves unreported.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvcache/eviction.hpp"
#include "kvcache/export.hpp"
#include "kvcache/host_only.hpp"
#include "kvcache/status.hpp"
#include "kvcache/types.hpp"

namespace kvcache {

// What left the cache, so the engine can recompute it.
struct EvictionReport {
  std::vector<SeqId> preempted;       // whole sequences, released
  std::vector<DroppedRange> dropped;  // exactly the positions removed from live sequences
  std::uint64_t cached_pages_freed = 0;
  bool empty() const { return preempted.empty() && dropped.empty() && cached_pages_freed == 0; }
  KVCACHE_API void merge(const EvictionReport& other);
};

// An operation that failed after evicting something: what was evicted on the way is in
// report(); it happened and must be acted on.
class KVCACHE_API EvictionError : public Error {
 public:
  EvictionError(Code code, const std::string& message, EvictionReport report)
      : Error(code, message), report_(std::move(report)) {}
  const EvictionReport& report() const { return report_; }

 private:
  EvictionReport report_;
};

// A reserve that could not be met even after eviction.
class KVCACHE_API CacheFull : public EvictionError {
 public:
  CacheFull(const std::string& message, EvictionReport report)
      : EvictionError(Code::out_of_memory, message, std::move(report)) {}
};

}  // namespace kvcache
