// A Step as Python holds it: the C++ Step and the Cache it belongs to (kept alive by the binding
// while the Step lives).
#pragma once

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
  // Closing a step (undoing it when unfinished) takes the Cache's lock with the GIL held: safe,
  // since a thread holding that lock never waits for the GIL.
  ~StepHandle() { step.reset(); }
  Step& get() { return *step; }
};

}  // namespace kvcache::python
