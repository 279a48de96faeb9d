// One loaded plugin file: the Boost.DLL handle and the validated descriptor its entry returned.
// Every object made from the plugin holds a shared_ptr to this, so the library stays loaded while
// anything from it lives.
#pragma once

#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include <boost/dll/shared_library.hpp>

#include "kvcache/plugin_abi.h"

namespace kvcache::plugin {

// Why a file was refused; the text is what users see next to the file name.
class LoadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class PluginLibrary {
 public:
  // Loads and validates; throws LoadError with a precise reason.
  static std::shared_ptr<const PluginLibrary> load(const std::filesystem::path& file);

  PluginLibrary(const PluginLibrary&) = delete;
  PluginLibrary& operator=(const PluginLibrary&) = delete;

  const std::filesystem::path& file() const { return file_; }
  const kvc_plugin_descriptor& descriptor() const { return *descriptor_; }

 private:
  PluginLibrary(std::filesystem::path file, boost::dll::shared_library library)
      : file_(std::move(file)), library_(std::move(library)) {}

  std::filesystem::path file_;
  boost::dll::shared_library library_;
  const kvc_plugin_descriptor* descriptor_ = nullptr;
};

}  // namespace kvcache::plugin
