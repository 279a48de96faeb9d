// What the host checks in a plugin's descriptor before it reads anything through it. A plugin is
// untrusted input: every count is bounded before an array is indexed, every pointer a count
// covers must be there, and names must be unique, so a corrupt descriptor refuses its file with
// the reason instead of crashing the host or shadowing a component silently.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvcache/capabilities.hpp"
#include "kvcache/plugin_abi.h"

namespace kvcache::plugin {

// Past these a count is corruption, not a large plugin (docs/plugin-abi.md).
inline constexpr std::uint32_t kMaxComponents = 256;
inline constexpr std::uint32_t kMaxListed = 64;  // formats, head dims, page sizes of a component
inline constexpr std::uint32_t kMaxListedPageSize = 1024;

// Throws LoadError naming the component and what is wrong.
void check_descriptor(const kvc_plugin_descriptor& d);

// The smallest table size a component of `kind` must have in ABI major 1; 0 for unknown kinds.
std::size_t minimum_table_size(std::uint32_t kind);

// The fields of kvc_capabilities that `c` holds, by its struct_size.
bool has_abi_1_3_capabilities(const kvc_capabilities& c);

// What a component declares, read as far as its capabilities struct goes (a field a plugin's
// struct ends before reads as not declared); for a descriptor check_descriptor accepted.
Capabilities capabilities_of(const kvc_component& c);

}  // namespace kvcache::plugin
