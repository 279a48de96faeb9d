// What the remote tier did (Cache::remote_stats): hits, misses, what it refused, what it wrote.
#pragma once

#include <cstdint>

namespace kvcache::remote {

struct TierStats {
  std::uint64_t lookups = 0;         // prefix matches (and lookups) that asked the store
  std::uint64_t hit_pages = 0;       // pages pulled, verified and imported
  std::uint64_t miss_pages = 0;      // pages asked for and not imported (absent, failed, late)
  std::uint64_t corrupt = 0;         // values that failed verification (removed; chain stopped)
  std::uint64_t no_room = 0;         // pulls stopped because no local page was free or cached
  std::uint64_t failures = 0;        // transport calls that failed (reads and writes)
  std::uint64_t skipped = 0;         // calls not made while the breaker was open
  std::uint64_t queued_pages = 0;    // pages handed to the write queue
  std::uint64_t written_pages = 0;   // pages the store took
  std::uint64_t present_pages = 0;   // pages not written: the store held them already
  std::uint64_t dropped_writes = 0;  // pages not written: queue full, failure, breaker open
  std::uint64_t bytes_read = 0;      // values pulled
  std::uint64_t bytes_written = 0;   // values written
  double lookup_p50_us = 0;          // over the last 1,024 lookups
  double lookup_p99_us = 0;
};

}  // namespace kvcache::remote
