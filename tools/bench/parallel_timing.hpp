// Timing work that several threads do at once: the threads are made first and start together, so
// that their creation is not timed, and the fastest of several runs counts (a probe of a roof
// reports the best the machine did, or a fraction of it could read above 1).
#pragma once

#include <functional>

namespace kvcache::bench {

// The fewest seconds of `repeats` runs in which `threads` threads each call work(thread) once.
double fastest_parallel_run(int threads, int repeats, const std::function<void(int)>& work);

}  // namespace kvcache::bench
