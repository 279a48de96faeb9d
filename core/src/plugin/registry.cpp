#include "kvcache/registry.hpp"

#include <algorithm>
#include <cstddef>
#include <exception>
#include <string>

#include <spdlog/spdlog.h>

#include "kvcache/formats.hpp"
#include "kvcache/nearest_name.hpp"
#include "plugin/adapters.hpp"
#include "plugin/descriptor_check.hpp"
#include "plugin/discovery.hpp"
#include "plugin/host_call.hpp"
#include "plugin/plugin_library.hpp"

namespace kvcache {
namespace fs = std::filesystem;
using plugin::PluginLibrary;

namespace {

// Asks the component whether it can run here. A C entry must not throw; one that does anyway
// makes the component unavailable with that reason, as does a failure without a message.
void check_availability(const kvc_component& c, ComponentInfo& info) {
  kvc_error err{sizeof(kvc_error), KVC_OK, {}};
  int32_t rc = KVC_OK;
  try {
    rc = c.availability(&err);
  } catch (const std::exception& e) {
    rc = KVC_INTERNAL;
    info.unavailable_reason = std::string("its availability check threw: ") + e.what();
  } catch (...) {
    rc = KVC_INTERNAL;
    info.unavailable_reason = "its availability check threw an unknown exception";
  }
  if (rc == KVC_OK) return;
  info.available = false;
  if (info.unavailable_reason.empty()) info.unavailable_reason = plugin::message_of(err);
  if (info.unavailable_reason.empty())
    info.unavailable_reason = "its availability check failed (" +
                              std::string(code_name(static_cast<Code>(rc))) + ") without a reason";
}

bool known_kind(uint32_t kind) {
  return kind >= KVC_KIND_BACKEND && kind <= KVC_KIND_TRANSPORT;
}

// Does a `required` entry name this file or plugin?
bool names_plugin(const std::string& entry, const fs::path& file, const std::string& plugin_name) {
  if (entry == plugin_name || entry == file.filename().string() || entry == file.stem().string())
    return true;
  std::error_code ec;
  return fs::equivalent(fs::path(entry), file, ec);
}

}  // namespace

struct Registry::Impl {
  struct Entry {
    std::shared_ptr<const PluginLibrary> library;
    const kvc_component* component = nullptr;
  };
  std::vector<ComponentInfo> infos;
  std::vector<Entry> entries;  // parallel to infos
  std::vector<RejectedPlugin> rejected;
  std::vector<std::shared_ptr<const PluginLibrary>> libraries;

  void add(std::shared_ptr<const PluginLibrary> library) {
    const kvc_plugin_descriptor& d = library->descriptor();
    for (uint32_t i = 0; i < d.n_components; ++i) {
      const kvc_component& c = d.components[i];
      if (!known_kind(c.kind)) {
        spdlog::debug("{}: skipping component '{}' of unknown kind {}", library->file().string(),
                      c.name, c.kind);
        continue;
      }
      ComponentInfo info;
      info.kind = static_cast<ComponentKind>(c.kind);
      info.name = c.name;
      info.version = c.version ? c.version : "";
      info.plugin = d.name;
      info.plugin_version = d.version ? d.version : "";
      info.file = library->file();
      info.capabilities = plugin::capabilities_of(c);
      if (c.availability != nullptr) check_availability(c, info);
      if (const ComponentInfo* earlier = find(info.kind, info.name))
        info.shadowed_by = earlier->file.string();
      infos.push_back(std::move(info));
      entries.push_back({library, &c});
    }
    libraries.push_back(std::move(library));
  }

  const ComponentInfo* find(ComponentKind kind, std::string_view name) const {
    for (const ComponentInfo& info : infos)
      if (info.kind == kind && info.name == name && info.shadowed_by.empty()) return &info;
    return nullptr;
  }

  std::vector<std::string> names(ComponentKind kind) const {
    std::vector<std::string> result;
    for (const ComponentInfo& info : infos)
      if (info.kind == kind && info.shadowed_by.empty()) result.push_back(info.name);
    return result;
  }

  // The entry to instantiate, or a precise error.
  const Entry& resolve(ComponentKind kind, std::string_view name) const {
    const ComponentInfo* info = find(kind, name);
    if (info == nullptr) {
      const std::vector<std::string> known = names(kind);
      throw Error(Code::not_found,
                  "unknown " + std::string(kind_name(kind)) + " '" + std::string(name) + "'" +
                      did_you_mean(name, known) +
                      (known.empty() ? "; none is installed" : "; installed: " + name_list(known)));
    }
    if (!info->available)
      throw Error(Code::unavailable, std::string(kind_name(kind)) + " '" + info->name +
                                         "' is unavailable: " + info->unavailable_reason);
    return entries[static_cast<std::size_t>(info - infos.data())];
  }

  template <class Make>
  auto create(ComponentKind kind, std::string_view name, const nlohmann::json& options,
              Make make) const {
    const Entry& entry = resolve(kind, name);
    const std::string who = std::string(kind_name(kind)) + " '" + std::string(name) + "' (" +
                            entry.library->file().filename().string() + ")";
    const std::string json = options.is_null() ? "{}" : options.dump();
    return make(entry.library, *entry.component, json, who);
  }

  void check_required(const PluginSettings& settings) const {
    std::vector<Diagnostic> problems;
    const auto require = [&](const std::string& entry, const SourceLocation& where) {
      for (const auto& library : libraries)
        if (names_plugin(entry, library->file(), library->descriptor().name)) return;
      std::string message = "required plugin '" + entry + "' ";
      const auto rejected_it = std::find_if(rejected.begin(), rejected.end(), [&](const auto& r) {
        return names_plugin(entry, r.file, "");
      });
      if (rejected_it != rejected.end())
        message +=
            "could not be loaded: " + rejected_it->file.string() + ": " + rejected_it->reason;
      else
        message += "was not found in any plugin location (see `kvcache plugins`)";
      problems.push_back({Diagnostic::Severity::error, where, "plugins", message});
    };
    for (const PluginPath& p : settings.paths) {
      if (!p.required) continue;
      const fs::path path = plugin::resolve_plugin_path(p);
      std::error_code ec;
      if (!fs::is_directory(path, ec)) {
        require(path.string(), p.where);
        continue;
      }
      // A required folder: at least one plugin from it must load.
      const auto in_folder = [&](const fs::path& file) {
        return fs::equivalent(file.parent_path(), path, ec);
      };
      if (std::any_of(libraries.begin(), libraries.end(),
                      [&](const auto& l) { return in_folder(l->file()); }))
        continue;
      std::string message = "required plugin folder '" + path.string() + "' gave no plugin";
      for (const RejectedPlugin& r : rejected)
        if (in_folder(r.file)) message += "; " + r.file.filename().string() + ": " + r.reason;
      problems.push_back({Diagnostic::Severity::error, p.where, "plugins", message});
    }
    for (const RequiredPlugin& r : settings.required) require(r.name, r.where);
    if (!problems.empty()) throw ConfigError(std::move(problems));
  }
};

Registry::Registry(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Registry::~Registry() = default;

std::shared_ptr<const Registry> Registry::load(const PluginSettings& settings) {
  auto impl = std::make_unique<Impl>();
  for (const fs::path& file : plugin::candidate_files(search_plan(settings))) {
    try {
      impl->add(PluginLibrary::load(file));
      spdlog::debug("loaded plugin {}", file.string());
    } catch (const plugin::LoadError& e) {
      spdlog::debug("skipped plugin {}: {}", file.string(), e.what());
      impl->rejected.push_back({file, e.what()});
    }
  }
  impl->check_required(settings);
  return std::shared_ptr<const Registry>(new Registry(std::move(impl)));
}

const std::vector<ComponentInfo>& Registry::components() const {
  return impl_->infos;
}
const std::vector<RejectedPlugin>& Registry::rejected() const {
  return impl_->rejected;
}

const ComponentInfo* Registry::find(ComponentKind kind, std::string_view name) const {
  return impl_->find(kind, name);
}

std::vector<std::string> Registry::names(ComponentKind kind) const {
  return impl_->names(kind);
}

std::unique_ptr<AttentionMask> Registry::create_mask(std::string_view name,
                                                     const nlohmann::json& options) const {
  return impl_->create(ComponentKind::mask, name, options, plugin::make_mask);
}

std::unique_ptr<Quantizer> Registry::create_quantizer(std::string_view name,
                                                      const nlohmann::json& options) const {
  return impl_->create(ComponentKind::quantizer, name, options, plugin::make_quantizer);
}

std::unique_ptr<EvictionPolicy> Registry::create_eviction(std::string_view name,
                                                          const nlohmann::json& options) const {
  return impl_->create(ComponentKind::eviction, name, options, plugin::make_eviction);
}

std::unique_ptr<remote::ByteStore> Registry::create_transport(std::string_view name,
                                                              const nlohmann::json& options) const {
  return impl_->create(ComponentKind::transport, name, options, plugin::make_transport);
}

std::unique_ptr<Backend> Registry::create_backend(std::string_view name,
                                                  const nlohmann::json& options) const {
  return impl_->create(ComponentKind::backend, name, options, plugin::make_backend);
}

void check_format_name(const Registry& registry, std::string_view format) {
  if (is_built_in_format(format) || registry.find(ComponentKind::quantizer, format) != nullptr)
    return;
  throw Error(Code::not_found, "unknown storage format '" + std::string(format) + "'" +
                                   did_you_mean(format, registry.names(ComponentKind::quantizer)));
}

StoreSpec with_codecs(StoreSpec spec, const Registry& registry) {
  const auto codec = [&](const std::string& name,
                         const nlohmann::json& options) -> std::shared_ptr<const Quantizer> {
    if (is_built_in_format(name)) return nullptr;
    check_format_name(registry, name);
    return registry.create_quantizer(name, options);
  };
  spec.k_codec = codec(spec.k_format, spec.k_options);
  spec.v_codec = spec.v_format == spec.k_format && spec.v_options == spec.k_options
                     ? spec.k_codec
                     : codec(spec.v_format, spec.v_options);
  return spec;
}

std::optional<std::string> format_refusal(const ComponentInfo& backend, const std::string& format) {
  if (backend.capabilities.runs(format)) return std::nullopt;
  return "backend '" + backend.name + "' runs only its own formats (" +
         name_list(backend.capabilities.formats) + "), not '" + format + "'";
}

}  // namespace kvcache
