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

void raise(const char* type, nb::object instance) {
  const nb::object cls = nb::module_::import_("kvcache.errors").attr(type);
  PyErr_SetObject(cls.ptr(), instance.ptr());
}

nb::object errors(const char* type) {
  return nb::module_::import_("kvcache.errors").attr(type);
}

const char* class_of(Code code) {
  switch (code) {
    case Code::invalid_argument:
      return "InvalidArgument";
    case Code::not_found:
      return "NotFound";
    case Code::out_of_memory:
      return "OutOfMemory";
    case Code::unsupported:
      return "Unsupported";
    case Code::unavailable:
      return "Unavailable";
    default:
      return "Error";
  }
}

}  // namespace

void bind_errors(nb::module_&) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const ConfigError& e) {
      nb::list diagnostics;
      for (const Diagnostic& d : e.diagnostics()) diagnostics.append(to_string(d));
      raise("ConfigError", errors("ConfigError")(e.what(), diagnostics));
    } catch (const CacheFull& e) {
      raise("CacheFull", errors("CacheFull")(e.what(), nb::cast(e.report())));
    } catch (const EvictionError& e) {
      raise("EvictionError", errors("EvictionError")(e.what(), nb::cast(e.report()),
                                                     std::string(code_name(e.code()))));
    } catch (const Error& e) {
      const char* type = class_of(e.code());
      raise(type, errors(type)(e.what(), std::string(code_name(e.code()))));
    }
  });
}

}  // namespace kvcache::python
