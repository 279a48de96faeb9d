#include "bindings.hpp"

NB_MODULE(_kvcache, m) {
  m.doc() = "kvcache: paged, quantized KV caches for LLM inference (the C++ library's binding)";
  kvcache::python::bind_errors(m);
  kvcache::python::bind_step(m);
  kvcache::python::bind_cache(m);
  kvcache::python::bind_registry(m);
  kvcache::python::bind_reference(m);
}
