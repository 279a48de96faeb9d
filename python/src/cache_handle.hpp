// A Cache as Python holds it: the C++ Cache and the one mutex that makes calls from several
// Python threads safe. Every call releases the GIL first and then takes the mutex (never the
// other way round), so a thread waiting for the Cache never blocks the interpreter.
#pragma once

#include <memory>
#include <mutex>
#include <utility>

#include <nanobind/nanobind.h>

#include "kvcache/cache.hpp"

namespace kvcache::python {

struct CacheHandle {
  std::unique_ptr<Cache> cache;
  std::mutex mutex;
};

// Runs f() on the Cache without the GIL, under its mutex.
template <class F>
decltype(auto) locked(CacheHandle& handle, F&& f) {
  nanobind::gil_scoped_release release;
  std::lock_guard lock(handle.mutex);
  return std::forward<F>(f)();
}

}  // namespace kvcache::python
