// C++ errors as the typed exceptions of kvcache.errors (Python classes, so that they subclass
// the built-in exceptions a caller expects): a config error carries its diagnostics, an eviction
// error and CacheFull the report of what was evicted on the way, every other Error its code.
#include <exception>
#include <string>

#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "kvcache/config.hpp"
#include "kvcache/eviction_report.hpp"

namespace nb = nanobind;

namespace kvcache::python {
namespace {

// A name of kvcache.errors (imported only once an exception of ours is being translated).
nb::object errors(const char* name) {
  return nb::module_::import_("kvcache.errors").attr(name);
}

// Raises `instance`, an exception object of kvcache.errors.
void raise(const nb::object& instance) {
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(instance.ptr())), instance.ptr());
}

}  // namespace

void bind_errors(nb::module_&) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const ConfigError& e) {
      nb::list diagnostics;
      for (const Diagnostic& d : e.diagnostics()) diagnostics.append(to_string(d));
      raise(errors("ConfigError")(e.what(), diagnostics));
    } catch (const CacheFull& e) {
      raise(errors("CacheFull")(e.what(), nb::cast(e.report())));
    } catch (const EvictionError& e) {
      raise(errors("EvictionError")(e.what(), nb::cast(e.report()),
                                    std::string(code_name(e.code()))));
    } catch (const Error& e) {  // the class of its code (errors.from_code)
      raise(errors("from_code")(e.what(), std::string(code_name(e.code()))));
    }
  });
}

}  // namespace kvcache::python
