// What the conformance cases run against, chosen once before they are generated: where the
// registry finds its components, the formats from outside to run beside the built-in ones, and
// optionally one backend or one format only. GoogleTest generates the parameterized cases when it
// is initialized, from backend_names() and the formats here, so configure() comes first; ctest's
// binaries configure from the environment, `kvcache conformance` from its options.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kvcache/config.hpp"
#include "kvcache/registry.hpp"

namespace kvcache::conformance {

struct Setup {
  PluginSettings plugins;                  // where the registry finds components
  std::vector<std::string> extra_formats;  // quantizer components run beside the built-in formats
  std::string backend;                     // empty: every backend found
  std::string format;                      // empty: every format; else the cases that use it
};

// Replaces the setup and the registry loaded from it (before the cases are generated). A format
// that is not built in is added to extra_formats.
void configure(Setup setup);
const Setup& setup();
const Registry& registry();
std::shared_ptr<const Registry> shared_registry();  // the same, for Cache::open

// The backends the cases run on: the chosen one, or every backend the registry found that is
// available here. One that is not (a GPU backend without a device) gets one case that skips
// with its reason, not a skipped copy of every case: found_backends() lists them all.
std::vector<std::string> backend_names();
std::vector<std::string> found_backends();
const std::vector<std::string>& extra_formats();
// Whether a case storing K and V in these formats is wanted (Setup::format).
bool wanted(const std::string& k_format, const std::string& v_format);

// The spec with the codecs a store needs for formats that are not built in (as Cache::open).
StoreSpec with_codecs(const StoreSpec& spec);
// Why `backend` cannot run `spec` here, or empty when it can: not installed, unavailable (with
// the backend's own reason), or a storage format it does not run (as its capabilities say).
std::string skip_reason(const std::string& backend, const StoreSpec& spec);
// A store from `backend`, or null when skip_reason() says why not.
std::unique_ptr<CacheStore> open_store(const std::string& backend, const StoreSpec& spec);

}  // namespace kvcache::conformance
