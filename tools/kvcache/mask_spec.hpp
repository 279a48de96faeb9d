// Mask specs on the command line: "causal", "sliding-window:W", "sink-window:S:W", "chunked:C",
// or any installed mask's name (no options).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kvcache::tool {

struct MaskChoice {
  std::string name;
  nlohmann::json options = nlohmann::json::object();
};

// Throws Error(invalid_argument) naming the expected form.
MaskChoice parse_mask_spec(std::string_view spec);

}  // namespace kvcache::tool
