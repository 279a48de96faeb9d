// Calling into a plugin from the host: a fresh kvc_error per call, and a failed status turned
// back into kvcache::Error with the component named.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "kvcache/plugin_abi.h"
#include "kvcache/status.hpp"
#include "plugin/plugin_library.hpp"

namespace kvcache::plugin {

// The message a plugin wrote, even if it forgot the terminating NUL.
std::string message_of(const kvc_error& err);

// Throws Error(code, "<who>: <message>") when rc is not KVC_OK.
void throw_if_failed(int32_t rc, const kvc_error& err, const std::string& who);

template <class F>
void host_call(const std::string& who, F&& call) {
  kvc_error err{sizeof(kvc_error), KVC_OK, {}};
  throw_if_failed(call(&err), err, who);
}

// A live plugin object: its table, its opaque handle, and the library it came from. Destroys the
// object before letting go of the library.
template <class Table>
class PluginInstance {
 public:
  PluginInstance(std::shared_ptr<const PluginLibrary> library, const Table* table, void* handle,
                 std::string who)
      : library_(std::move(library)), table_(table), handle_(handle), who_(std::move(who)) {}
  ~PluginInstance() { table_->destroy(handle_); }
  PluginInstance(const PluginInstance&) = delete;
  PluginInstance& operator=(const PluginInstance&) = delete;

  // Calls table->fn(handle, args..., &err) and checks the status.
  template <class Fn, class... Args>
  void call(Fn Table::*fn, Args&&... args) const {
    host_call(who_, [&](kvc_error* err) { return (table_->*fn)(handle_, args..., err); });
  }
  // Whether the table has `fn`: a table of an older minor ends before the fields added later,
  // and an optional entry may be NULL.
  template <class Fn>
  bool has(Fn Table::*fn) const {
    const auto* base = reinterpret_cast<const char*>(table_);
    const auto* field = reinterpret_cast<const char*>(&(table_->*fn));
    return table_->struct_size >= static_cast<std::size_t>(field - base) + sizeof(Fn) &&
           table_->*fn != nullptr;
  }
  const Table& table() const { return *table_; }
  const std::shared_ptr<const PluginLibrary>& library() const { return library_; }
  void* handle() const { return handle_; }
  const std::string& who() const { return who_; }

 private:
  std::shared_ptr<const PluginLibrary> library_;  // declared first: released last
  const Table* table_;
  void* handle_;
  std::string who_;
};

// Takes ownership of an object a plugin made: its PluginInstance, or, when even that cannot be
// made (out of memory), the object destroyed again by its own table, so that it never leaks.
template <class Table>
std::unique_ptr<PluginInstance<Table>> adopt(std::shared_ptr<const PluginLibrary> library,
                                             const Table* table, void* handle,
                                             const std::string& who) {
  try {
    return std::make_unique<PluginInstance<Table>>(std::move(library), table, handle, who);
  } catch (...) {
    table->destroy(handle);
    throw;
  }
}

}  // namespace kvcache::plugin
