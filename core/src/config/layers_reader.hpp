// The `layers:` section (docs/configuration.md#layers): named groups of layers, each with its own
// mask and formats, laid over the model's layers by a pattern repeated over them or by each
// group's explicit ranges. Read per document; laid over the model once every source is in, since
// the model's layer count and the top-level mask and formats may come later (the environment).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/yaml_reader.hpp"
#include "kvcache/config.hpp"

namespace kvcache::detail {

struct LayersSection {
  struct Span {  // layers first..last, where it was written
    std::uint32_t first = 0, last = 0;
    SourceLocation where;
  };
  struct Run {  // `count` layers of group `name`, an entry of the pattern
    std::string name;
    std::uint32_t count = 1;
    SourceLocation where;
  };
  struct Group {
    std::string name;
    std::optional<ComponentChoice> mask = {}, k_format = {}, v_format = {};
    std::vector<Span> spans = {};  // explicit layers; empty with a pattern
    SourceLocation where = {};
  };
  std::vector<Group> groups;
  std::vector<Run> pattern;       // empty: each group names its layers
  std::uint32_t context = 32768;  // layers.context
  std::uint32_t rollback = 0;     // layers.rollback
  SourceLocation where;
};

// The section as written, or nullopt with its errors reported. A later section replaces it whole.
std::optional<LayersSection> read_layers(YamlReader& reader, const Field& value);

// config.layer_groups from `section`, over config.model.layers and the top-level mask and
// formats: every layer in exactly one group, no group empty. A section of one group sets the
// top-level mask and formats instead (the uniform case). Errors point at what was written.
void resolve_layers(const LayersSection& section, Config& config, std::vector<Diagnostic>& errors);

// "0-4, 6, 8-10": ascending layers as ranges, for messages and the YAML writer.
std::string layer_ranges(const std::vector<std::uint32_t>& layers);

}  // namespace kvcache::detail
