// A Step as Python holds it: the C++ Step and the Cache it belongs to (kept alive by the binding
// while the Step lives).
#pragma once

#include <mutex>
#include <optional>
#include <utility>

#include "cache_handle.hpp"
#include "kvcache/step.hpp"

namespace kvcache::python {

struct StepHandle {
  CacheHandle* cache;
  std::optional<Step> step;

  StepHandle(CacheHandle* c, Step s) : cache(c), step(std::move(s)) {}
  StepHandle(const StepHandle&) = delete;
  StepHandle& operator=(const StepHandle&) = delete;
  // Closing a step touches its Cache: under the Cache's mutex like every other call.
  ~StepHandle() {
    std::lock_guard lock(cache->mutex);
    step.reset();
  }
  Step& get() { return *step; }
};

}  // namespace kvcache::python
