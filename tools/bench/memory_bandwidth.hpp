// The machine's read bandwidth, measured in the calling process: benchmarks report their own
// throughput as a fraction of it, measured side by side, because this machine is shared and its
// absolute speed varies from minute to minute.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvcache::bench {

// The best GB/s (1e9 bytes/s) of `repeats` vectorized reads of a `bytes` buffer (far larger than
// the last-level cache) by `threads` threads of four streams each: the roof that attention's
// reads are a fraction of. The best, not the median: a fraction of a roof the probe did not reach
// would read above 1.
double read_bandwidth_gbps(std::size_t bytes = std::size_t{1} << 30, int threads = 2,
                           int repeats = 5);

// Where the sums land, so that the compiler keeps the reads.
extern std::uint64_t benchmark_sink;

}  // namespace kvcache::bench
