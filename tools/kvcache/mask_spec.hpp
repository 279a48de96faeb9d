// Mask specs on the command line: "causal", "sliding-window:W", "sink-window:S:W", "chunked:C",
// or any installed mask's name (no options).
#pragma once

#include <string>
#include <string_view>

#include "kvcache/config.hpp"

namespace kvcache::tool {

// The mask as a config names it (no source locations). Throws Error(invalid_argument) naming the
// expected form.
ComponentChoice parse_mask_spec(std::string_view spec);

}  // namespace kvcache::tool
