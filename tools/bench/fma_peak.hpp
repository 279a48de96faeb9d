// The machine's arithmetic roof, measured in the calling process beside the read bandwidth
// (memory_bandwidth.hpp): attention whose reads are a small fraction of the bandwidth may be
// bound by its multiply-adds instead, and this says how close they come to the most the cores do.
#pragma once

namespace kvcache::bench {

// The best GFLOP/s (a fused multiply-add counting 2) of `threads` threads, each running twelve
// independent chains of the widest FMA the CPU has (AVX-512, else AVX2's 256 bits), best of
// `repeats` runs; 0 where the CPU has neither.
double fma_peak_gflops(int threads = 2, int repeats = 3);

}  // namespace kvcache::bench
