// What a component declares it can do, as the plugin states it and the registry reports it.
// Empty lists mean "any". Backends also say which formats they run with fused kernels, whether
// they take any other format through its component's own codec, and the numeric contract of
// their attention (how their results may differ from exact arithmetic), from which the
// conformance suite derives its error bounds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvcache {

struct Capabilities {
  std::vector<std::string> formats;       // backends: formats run by fused kernels
  std::vector<std::uint32_t> head_dims;   // empty: any
  std::vector<std::uint32_t> page_sizes;  // empty: any
  std::string device_kind;                // "cpu", "cuda", "hip"; empty: device-independent
  // Backends: any other format runs through its component's encode and tile decode.
  bool foreign_formats = false;
  // Backends: the numeric contract (docs/plugin-abi.md, "Numerics"); empty: float throughout.
  nlohmann::json numerics = nlohmann::json::object();
  // Backends (ABI 1.6): the attention turns queries per range (VisibleRanges::rotations).
  bool query_rotation = false;
  // Backends (ABI 1.10): steps may run on the engine's stream (StepRequest::stream).
  bool engine_streams = false;

  // Whether a backend with these capabilities runs `format`.
  bool runs(const std::string& format) const {
    if (foreign_formats || formats.empty()) return true;
    for (const std::string& f : formats)
      if (f == format) return true;
    return false;
  }
};

}  // namespace kvcache
