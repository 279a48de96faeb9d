// Where plugins come from, in the design's order: files forced by config, KVCACHE_PLUGIN_PATH,
// config folders, the install folder, the folder of libkvcache. Never the current directory.
#pragma once

#include <filesystem>
#include <vector>

#include "kvcache/registry.hpp"

namespace kvcache::plugin {

// Plugin files in folders are recognised by name: kvcache-<name>.so. Forced files may have any
// name.
bool is_plugin_file_name(const std::filesystem::path& file);

// A plugins.paths entry as a path: relative ones are relative to the config file that holds
// them, never to the current directory.
std::filesystem::path resolve_plugin_path(const PluginPath& entry);

// Every file to try, in order, each once (by canonical path).
std::vector<std::filesystem::path> candidate_files(const SearchPlan& plan);

}  // namespace kvcache::plugin
