// A Cache as Python holds it. The Cache serializes calls from any thread itself (docs/cache.md,
// "Threads"), so the binding adds no lock of its own: a second lock taken around calls that may
// wait for another thread's step (begin_step) would deadlock with that thread's next call. Every
// call releases the GIL first, so a thread waiting for the Cache never blocks the interpreter.
#pragma once

#include <memory>
#include <utility>

#include <nanobind/nanobind.h>

#include "kvcache/cache.hpp"

namespace kvcache::python {

struct CacheHandle {
  std::unique_ptr<Cache> cache;
};

// Runs f() on the Cache without the GIL.
template <class F>
decltype(auto) locked(CacheHandle&, F&& f) {
  nanobind::gil_scoped_release release;
  return std::forward<F>(f)();
}

}  // namespace kvcache::python
