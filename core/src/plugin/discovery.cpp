#include "plugin/discovery.hpp"

#include <algorithm>
#include <set>
#include <string>
#include <system_error>

#include <boost/dll/runtime_symbol_info.hpp>

namespace kvcache {
namespace fs = std::filesystem;

namespace plugin {
namespace {

// Plugin files of one folder, sorted so that the order is the same on every machine.
std::vector<fs::path> plugin_files_in(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (is_plugin_file_name(it->path())) files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

bool is_plugin_file_name(const fs::path& file) {
  const std::string name = file.filename().string();
  return name.starts_with("kvcache-") && name.ends_with(".so");
}

fs::path resolve_plugin_path(const PluginPath& entry) {
  const fs::path path(entry.path);
  if (path.is_relative() && entry.where.line > 0)
    return fs::path(entry.where.origin).parent_path() / path;
  return path;
}

std::vector<fs::path> candidate_files(const SearchPlan& plan) {
  std::vector<fs::path> ordered;
  std::set<fs::path> seen;
  const auto add = [&](const fs::path& file) {
    std::error_code ec;
    const fs::path key = fs::weakly_canonical(file, ec);
    if (seen.insert(ec ? file : key).second) ordered.push_back(file);
  };
  const auto add_entry = [&](const fs::path& entry) {
    std::error_code ec;
    if (fs::is_directory(entry, ec)) {
      for (const fs::path& f : plugin_files_in(entry)) add(f);
    } else {
      add(entry);  // a file named explicitly, or a missing one: loading says which
    }
  };
  for (const fs::path& f : plan.forced_files) add(f);
  for (const fs::path& e : plan.env_entries) add_entry(e);
  for (const fs::path& d : plan.config_dirs) add_entry(d);
  for (const fs::path& d : {plan.install_dir, plan.library_dir}) {
    std::error_code ec;
    if (!d.empty() && fs::is_directory(d, ec)) add_entry(d);
  }
  return ordered;
}

}  // namespace plugin

SearchPlan Registry::search_plan(const PluginSettings& settings) {
  SearchPlan plan;
  for (const PluginPath& p : settings.paths) {
    const fs::path path = plugin::resolve_plugin_path(p);
    std::error_code ec;
    (fs::is_directory(path, ec) ? plan.config_dirs : plan.forced_files).push_back(path);
  }
  for (const std::string& e : settings.env_paths) plan.env_entries.emplace_back(e);
  plan.library_dir = boost::dll::this_line_location().parent_path().lexically_normal();
  // Relative to libkvcache, so an installed tree works wherever it is unpacked.
  plan.install_dir = plan.library_dir / "kvcache" / "plugins";
  return plan;
}

}  // namespace kvcache
