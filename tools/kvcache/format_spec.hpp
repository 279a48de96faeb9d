// Storage format specs on the command line: a format name, optionally with its options as
// KEY=VALUE pairs after a colon, e.g. "int4-group:group=64" or "kivi-k:group=32,bits=2" (the
// options a config's quantizer entry takes: {name: int4-group, group: 64}).
#pragma once

#include <string>
#include <string_view>

#include "kvcache/config.hpp"

namespace kvcache::tool {

// The format as a config's quantizer entry names it (no source locations). Integer values become
// numbers, true/false booleans, anything else a string; the format itself checks its options.
// Throws Error(invalid_argument) naming the expected form.
ComponentChoice parse_format_spec(std::string_view spec);

}  // namespace kvcache::tool
