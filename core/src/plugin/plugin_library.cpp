#include "plugin/plugin_library.hpp"

#include <dlfcn.h>

#include <cstddef>
#include <exception>
#include <string_view>

#include <boost/dll/detail/system_error.hpp>
#include <boost/dll/shared_library_load_mode.hpp>

#include "kvcache/status.hpp"
#include "plugin/descriptor_check.hpp"
#include "plugin/host_call.hpp"

#ifndef KVCACHE_VERSION
#define KVCACHE_VERSION "unknown"
#endif

namespace kvcache::plugin {
namespace {

// Boost.DLL's message is "<what> (dlerror system message: <dlerror>): <errno text>"; the errno
// part is unrelated noise, the dlerror part is what users need.
std::string dlerror_part(std::string_view text) {
  constexpr std::string_view marker = "dlerror system message: ";
  const std::size_t start = text.find(marker);
  if (start == std::string_view::npos) return std::string(text);
  const std::size_t end = text.rfind("): ");
  const std::size_t stop = (end == std::string_view::npos || end < start) ? text.size() : end;
  return std::string(text.substr(start + marker.size(), stop - start - marker.size()));
}

}  // namespace

std::shared_ptr<const PluginLibrary> PluginLibrary::load(const std::filesystem::path& file) {
  std::error_code fs_error;
  if (!std::filesystem::is_regular_file(file, fs_error))
    throw LoadError(std::filesystem::exists(file, fs_error) ? "not a regular file"
                                                            : "no such file");
  boost::dll::shared_library library;
  try {
    // rtld_now: an unresolved symbol fails here, with the file named, not at first call.
    // RTLD_NODELETE: a plugin's runtime dependencies may keep threads of their own (oneTBB's
    // workers, a GPU runtime's); unmapping code under them crashes at exit. Objects still hold
    // their library, so the ownership rule stands; only the final unmap is skipped (as ggml does).
    const auto mode = static_cast<boost::dll::load_mode::type>(
        static_cast<unsigned>(boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local) |
        RTLD_NODELETE);
    library.load(file, mode);
  } catch (const boost::dll::fs::system_error& e) {
    throw LoadError("cannot load: " + dlerror_part(e.what()));
  }
  if (!library.has(KVC_ENTRY_SYMBOL))
    throw LoadError(std::string("no entry function '") + KVC_ENTRY_SYMBOL +
                    "' (not a kvcache plugin)");
  const auto entry = library.get<std::remove_pointer_t<kvc_plugin_entry_fn>>(KVC_ENTRY_SYMBOL);

  const kvc_host_info host{sizeof(kvc_host_info), KVC_ABI_MAJOR, KVC_ABI_MINOR, KVCACHE_VERSION};
  kvc_error err{sizeof(kvc_error), KVC_OK, {}};
  const kvc_plugin_descriptor* descriptor = nullptr;
  int32_t rc = KVC_OK;
  // The contract says the entry never throws; a hand-written one might anyway.
  try {
    rc = entry(&host, &descriptor, &err);
  } catch (const std::exception& e) {
    throw LoadError(std::string("entry function threw an exception: ") + e.what());
  } catch (...) {
    throw LoadError("entry function threw an unknown exception");
  }
  if (rc != KVC_OK)
    throw LoadError("entry function failed (" + std::string(code_name(static_cast<Code>(rc))) +
                    "): " + message_of(err));
  if (descriptor == nullptr) throw LoadError("entry function returned no descriptor");
  check_descriptor(*descriptor);

  std::shared_ptr<PluginLibrary> result(new PluginLibrary(file, std::move(library)));
  result->descriptor_ = descriptor;
  return result;
}

}  // namespace kvcache::plugin
