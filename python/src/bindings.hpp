// The Python module kvcache._kvcache: one function per concept registers its part of the module.
// The Python package (python/kvcache) re-exports it with the exception classes of errors.py.
#pragma once

#include <nanobind/nanobind.h>

namespace kvcache::python {

void bind_errors(nanobind::module_& m);     // errors.cpp: C++ errors to kvcache.errors
void bind_cache(nanobind::module_& m);      // cache_binding.cpp: Cache, its store's views
void bind_step(nanobind::module_& m);       // step_binding.cpp: Step, EvictionReport
void bind_registry(nanobind::module_& m);   // registry_binding.cpp: plugins, formats, configs
void bind_reference(nanobind::module_& m);  // reference_binding.cpp: codecs and attention

}  // namespace kvcache::python
