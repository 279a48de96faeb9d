#include "plugin/descriptor_check.hpp"

#include <set>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "plugin/plugin_library.hpp"

namespace kvcache::plugin {
namespace {

void check_list(const std::string& which, const char* what, std::uint32_t n, const void* items) {
  if (n > kMaxListed)
    throw LoadError(which + " lists " + std::to_string(n) + " " + what + ", more than the " +
                    std::to_string(kMaxListed) + " a descriptor may list");
  if (n > 0 && items == nullptr)
    throw LoadError(which + " lists " + std::to_string(n) + " " + what + " but no array of them");
}

void check_capabilities(const std::string& which, std::uint32_t kind, const kvc_capabilities& k) {
  constexpr std::size_t minimum = offsetof(kvc_capabilities, device_kind) + sizeof(const char*);
  if (k.struct_size < minimum)
    throw LoadError(which + ": capabilities are " + std::to_string(k.struct_size) +
                    " bytes, ABI 1.0 needs " + std::to_string(minimum));
  check_list(which, "formats", k.n_formats, k.formats);
  check_list(which, "head dims", k.n_head_dims, k.head_dims);
  check_list(which, "page sizes", k.n_page_sizes, k.page_sizes);
  for (std::uint32_t i = 0; i < k.n_formats; ++i)
    if (k.formats[i] == nullptr || *k.formats[i] == '\0')
      throw LoadError(which + ": format #" + std::to_string(i) + " has no name");
  for (std::uint32_t i = 0; i < k.n_head_dims; ++i)
    if (k.head_dims[i] == 0) throw LoadError(which + ": lists head dim 0");
  for (std::uint32_t i = 0; i < k.n_page_sizes; ++i)
    if (k.page_sizes[i] == 0 || k.page_sizes[i] > kMaxListedPageSize)
      throw LoadError(which + ": lists page size " + std::to_string(k.page_sizes[i]) +
                      " (page sizes are 1 to " + std::to_string(kMaxListedPageSize) + ")");
  if (!has_abi_1_3_capabilities(k)) return;
  if (k.foreign_formats > 1)
    throw LoadError(which + ": foreign_formats is " + std::to_string(k.foreign_formats) +
                    " (0 or 1)");
  if (k.foreign_formats != 0 && kind != KVC_KIND_BACKEND)
    throw LoadError(which + ": foreign_formats is for backends only");
  if (k.numerics_json != nullptr &&
      !nlohmann::json::parse(k.numerics_json, nullptr, false).is_object())
    throw LoadError(which + ": numerics_json is not a JSON object");
}

void check_component(const kvc_component& c, std::uint32_t index) {
  std::string which = "component #" + std::to_string(index);
  if (c.struct_size < offsetof(kvc_component, table) + sizeof(c.table))
    throw LoadError(which + ": record is " + std::to_string(c.struct_size) + " bytes, too small");
  if (c.name == nullptr || *c.name == '\0') throw LoadError(which + " has no name");
  which += " '" + std::string(c.name) + "'";
  const std::size_t needed = minimum_table_size(c.kind);
  if (needed == 0) return;  // a kind from a newer minor: the registry ignores it
  if (c.table == nullptr) throw LoadError(which + " has no function table");
  const auto table_size = *static_cast<const std::uint32_t*>(c.table);
  if (table_size < needed)
    throw LoadError(which + ": function table is " + std::to_string(table_size) +
                    " bytes, ABI 1.0 needs " + std::to_string(needed));
  if (c.capabilities != nullptr) check_capabilities(which, c.kind, *c.capabilities);
}

}  // namespace

bool has_abi_1_3_capabilities(const kvc_capabilities& c) {
  return c.struct_size >= offsetof(kvc_capabilities, numerics_json) + sizeof(c.numerics_json);
}

void check_descriptor(const kvc_plugin_descriptor& d) {
  if (d.struct_size < offsetof(kvc_plugin_descriptor, components) + sizeof(d.components))
    throw LoadError("descriptor is " + std::to_string(d.struct_size) + " bytes, too small");
  if (d.abi_major != KVC_ABI_MAJOR)
    throw LoadError("ABI major mismatch: plugin is built for ABI " + std::to_string(d.abi_major) +
                    "." + std::to_string(d.abi_minor) + ", this host implements ABI " +
                    std::to_string(KVC_ABI_MAJOR) + "." + std::to_string(KVC_ABI_MINOR));
  if (d.name == nullptr || *d.name == '\0') throw LoadError("descriptor has no plugin name");
  if (d.n_components > kMaxComponents)
    throw LoadError("descriptor lists " + std::to_string(d.n_components) +
                    " components, more than " + std::to_string(kMaxComponents));
  if (d.n_components > 0 && d.components == nullptr)
    throw LoadError("descriptor lists " + std::to_string(d.n_components) +
                    " components but no component array");
  std::set<std::pair<std::uint32_t, std::string_view>> seen;
  for (std::uint32_t i = 0; i < d.n_components; ++i) {
    const kvc_component& c = d.components[i];
    check_component(c, i);
    if (!seen.emplace(c.kind, c.name).second)
      throw LoadError("component #" + std::to_string(i) + " '" + c.name +
                      "' repeats the name of an earlier component of its kind");
  }
}

std::size_t minimum_table_size(std::uint32_t kind) {
  switch (kind) {
    case KVC_KIND_BACKEND:  // ABI 1.0 ended before memory_bandwidth
      return offsetof(kvc_backend_table, memory_bandwidth);
    case KVC_KIND_QUANTIZER:
      return sizeof(kvc_quantizer_table);
    case KVC_KIND_MASK:
      return sizeof(kvc_mask_table);
    case KVC_KIND_EVICTION:  // ABI 1.1 ended before drops_tokens
      return offsetof(kvc_eviction_table, drops_tokens);
    case KVC_KIND_TRANSPORT:
      return sizeof(kvc_transport_table);
    default:
      return 0;
  }
}

Capabilities capabilities_of(const kvc_component& c) {
  Capabilities caps;
  const kvc_capabilities* k = c.capabilities;
  if (k == nullptr) return caps;
  for (uint32_t i = 0; i < k->n_formats; ++i) caps.formats.emplace_back(k->formats[i]);
  caps.head_dims.assign(k->head_dims, k->head_dims + k->n_head_dims);
  caps.page_sizes.assign(k->page_sizes, k->page_sizes + k->n_page_sizes);
  if (k->device_kind != nullptr) caps.device_kind = k->device_kind;
  // ABI 1.3 fields, when the plugin's struct has them (check_descriptor vetted the JSON).
  if (has_abi_1_3_capabilities(*k)) {
    caps.foreign_formats = k->foreign_formats != 0;
    if (k->numerics_json != nullptr) caps.numerics = nlohmann::json::parse(k->numerics_json);
  }
  if (k->struct_size >= offsetof(kvc_capabilities, query_rotation) + sizeof(k->query_rotation))
    caps.query_rotation = k->query_rotation != 0;
  if (k->struct_size >= offsetof(kvc_capabilities, engine_streams) + sizeof(k->engine_streams))
    caps.engine_streams = k->engine_streams != 0;
  return caps;
}

}  // namespace kvcache::plugin
