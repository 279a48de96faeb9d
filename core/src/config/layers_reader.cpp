#include "config/layers_reader.hpp"

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <map>
#include <string_view>

#include "kvcache/nearest_name.hpp"

namespace kvcache::detail {
namespace {

std::string_view trimmed(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

std::optional<std::uint32_t> number(std::string_view text) {
  text = trimmed(text);
  std::uint32_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

// The comma-separated parts of a scalar, or the items of a list, each with where it stands (a
// scalar's parts all at the scalar: yaml-cpp gives no column within one).
std::optional<std::vector<std::pair<std::string, Field>>> parts(YamlReader& reader,
                                                                const Field& value,
                                                                std::string_view what) {
  std::vector<std::pair<std::string, Field>> out;
  const auto split = [&](const Field& field) {
    const std::string text = field.node.Scalar();
    std::size_t start = 0;
    while (start <= text.size()) {
      const std::size_t comma = std::min(text.find(',', start), text.size());
      out.emplace_back(std::string(trimmed(std::string_view(text).substr(start, comma - start))),
                       field);
      start = comma + 1;
    }
  };
  if (value.node.IsScalar()) {
    split(value);
    return out;
  }
  const auto items = reader.items(value, what);
  if (!items) return std::nullopt;
  for (const Field& item : *items) {
    if (!item.node.IsScalar()) {
      reader.error(item, "expected " + std::string(what) + ", got " + describe(item.node));
      return std::nullopt;
    }
    split(item);
  }
  return out;
}

// "0-4, 6, 8-10" or a list of such items.
std::optional<std::vector<LayersSection::Span>> read_spans(YamlReader& reader, const Field& value) {
  const std::string what = "layers as \"0-4, 6\" or a list of layers and ranges";
  const auto items = parts(reader, value, what);
  if (!items) return std::nullopt;
  std::vector<LayersSection::Span> spans;
  for (const auto& [text, field] : *items) {
    const std::size_t dash = text.find('-');
    const auto first = number(std::string_view(text).substr(0, dash));
    const auto last =
        dash == std::string::npos ? first : number(std::string_view(text).substr(dash + 1));
    if (!first || !last || *last < *first) {
      reader.error(field, "expected " + what + ", got '" + text + "'");
      return std::nullopt;
    }
    spans.push_back({*first, *last, field.where});
  }
  return spans;
}

// [local x5, global] or "local x5, global".
std::optional<std::vector<LayersSection::Run>> read_pattern(YamlReader& reader,
                                                            const Field& value) {
  const std::string what = "group names, each with an optional count (\"local x5, global\")";
  const auto items = parts(reader, value, what);
  if (!items) return std::nullopt;
  std::vector<LayersSection::Run> runs;
  for (const auto& [text, field] : *items) {
    const std::size_t space = text.find_first_of(" \t");
    LayersSection::Run run{text.substr(0, space), 1, field.where};
    if (space != std::string::npos) {
      const std::string_view rest = trimmed(std::string_view(text).substr(space));
      const auto count = rest.starts_with('x') ? number(rest.substr(1)) : std::nullopt;
      if (!count || *count == 0) {
        reader.error(field, "expected " + what + ", got '" + text + "'");
        return std::nullopt;
      }
      run.count = *count;
    }
    if (run.name.empty()) {
      reader.error(field, "expected " + what + ", got an empty entry");
      return std::nullopt;
    }
    runs.push_back(std::move(run));
  }
  return runs;
}

// A group's format: a name for both K and V, or {k, v}.
bool read_formats(YamlReader& reader, const Field& value, LayersSection::Group& group) {
  if (value.node.IsScalar()) {
    ComponentChoice both;
    if (!reader.component(value, both)) return false;
    group.k_format = group.v_format = both;
    return true;
  }
  bool ok = true;
  reader.for_each_entry(value, {"k", "v"}, [&](const std::string& key, const Field& field) {
    ComponentChoice choice;
    ok = reader.component(field, choice) && ok;
    (key == "k" ? group.k_format : group.v_format) = choice;
  });
  return ok;
}

void add_error(std::vector<Diagnostic>& errors, const SourceLocation& where, const std::string& key,
               std::string message) {
  errors.push_back({Diagnostic::Severity::error, where, key, std::move(message)});
}

}  // namespace

std::optional<LayersSection> read_layers(YamlReader& reader, const Field& value) {
  LayersSection section;
  section.where = value.where;
  bool ok = true;
  const bool map = reader.for_each_entry(
      value, {"groups", "pattern", "context", "rollback"},
      [&](const std::string& key, const Field& field) {
        if (key == "context" || key == "rollback") {
          const auto tokens = reader.positive_int(field);
          ok = ok && tokens.has_value();
          if (tokens) (key == "context" ? section.context : section.rollback) = *tokens;
          return;
        }
        if (key == "pattern") {
          auto pattern = read_pattern(reader, field);
          ok = ok && pattern.has_value();
          if (pattern) section.pattern = std::move(*pattern);
          return;
        }
        const bool groups =
            reader.for_each_entry(field, {}, [&](const std::string& name, const Field& entry) {
              LayersSection::Group group{.name = name, .where = entry.where};
              if (!entry.node.IsNull())  // `global: {}` or `global:` takes every top-level choice
                reader.for_each_entry(entry, {"mask", "format", "layers"},
                                      [&](const std::string& what, const Field& f) {
                                        if (what == "mask") {
                                          ComponentChoice mask;
                                          if (reader.component(f, mask))
                                            group.mask = mask;
                                          else
                                            ok = false;
                                        } else if (what == "format") {
                                          ok = read_formats(reader, f, group) && ok;
                                        } else if (auto spans = read_spans(reader, f)) {
                                          group.spans = std::move(*spans);
                                        } else {
                                          ok = false;
                                        }
                                      });
              section.groups.push_back(std::move(group));
            });
        ok = ok && groups;
      });
  if (!map || !ok) return std::nullopt;
  if (section.groups.empty()) {
    reader.error(value, "expected at least one group under layers.groups");
    return std::nullopt;
  }
  return section;
}

std::string layer_ranges(const std::vector<std::uint32_t>& layers) {
  std::string text;
  for (std::size_t i = 0; i < layers.size();) {
    std::size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    if (!text.empty()) text.append(", ");
    text.append(std::to_string(layers[i]));
    if (j > i) text.append("-").append(std::to_string(layers[j]));
    i = j + 1;
  }
  return text;
}

void resolve_layers(const LayersSection& section, Config& config, std::vector<Diagnostic>& errors) {
  const std::uint32_t count = config.model.layers;
  const std::size_t before = errors.size();
  std::vector<std::string> names;
  for (const LayersSection::Group& group : section.groups) names.push_back(group.name);
  const bool spans = std::any_of(section.groups.begin(), section.groups.end(),
                                 [](const LayersSection::Group& g) { return !g.spans.empty(); });
  // owner[layer]: the index of its group in `section.groups`, or -1.
  std::vector<int> owner(count, -1);
  if (!section.pattern.empty() && spans) {
    add_error(errors, section.where, "layers",
              "give either layers.pattern or each group's layers, not both");
  } else if (!section.pattern.empty()) {
    std::vector<int> cycle;
    for (const LayersSection::Run& run : section.pattern) {
      const auto it = std::find(names.begin(), names.end(), run.name);
      if (it == names.end()) {
        add_error(errors, run.where, "layers.pattern",
                  "unknown group '" + run.name + "'" + did_you_mean(run.name, names));
        continue;
      }
      cycle.insert(cycle.end(), run.count, static_cast<int>(it - names.begin()));
    }
    for (std::uint32_t layer = 0; layer < count && !cycle.empty(); ++layer)
      owner[layer] = cycle[layer % cycle.size()];
  } else if (spans) {
    for (std::size_t g = 0; g < section.groups.size(); ++g)
      for (const LayersSection::Span& span : section.groups[g].spans) {
        const std::string key = "layers.groups." + names[g] + ".layers";
        if (span.last >= count) {
          add_error(errors, span.where, key,
                    "layer " + std::to_string(span.last) + " is past the model's " +
                        std::to_string(count) + " layers (0-" + std::to_string(count - 1) + ")");
          continue;
        }
        for (std::uint32_t layer = span.first; layer <= span.last; ++layer) {
          if (owner[layer] != -1) {
            add_error(errors, span.where, key,
                      "layer " + std::to_string(layer) + " is already in group '" +
                          names[static_cast<std::size_t>(owner[layer])] +
                          "': a layer belongs to one group");
            break;
          }
          owner[layer] = static_cast<int>(g);
        }
      }
  } else {
    add_error(errors, section.where, "layers",
              "say which layers each group holds: layers.pattern, or each group's layers");
  }
  if (errors.size() != before) return;
  std::vector<LayerGroup> groups;
  for (const LayersSection::Group& g : section.groups)
    groups.push_back({g.name,
                      g.mask.value_or(config.mask),
                      g.k_format.value_or(config.k_format),
                      g.v_format.value_or(config.v_format),
                      {},
                      g.where});
  std::vector<std::uint32_t> left_out;
  for (std::uint32_t layer = 0; layer < count; ++layer) {
    if (owner[layer] == -1)
      left_out.push_back(layer);
    else
      groups[static_cast<std::size_t>(owner[layer])].layers.push_back(layer);
  }
  if (!left_out.empty())
    add_error(errors, section.where, "layers",
              (left_out.size() == 1 ? "layer " : "layers ") + layer_ranges(left_out) +
                  (left_out.size() == 1 ? " is" : " are") + " in no group (the model has " +
                  std::to_string(count) + " layers)");
  for (const LayerGroup& group : groups)
    if (group.layers.empty())
      add_error(
          errors, group.where, "layers.groups." + group.name,
          "group '" + group.name + "' holds no layer of the model's " + std::to_string(count));
  if (errors.size() != before) return;
  config.group_context = section.context;
  config.group_rollback = section.rollback;
  if (groups.size() == 1) {  // one group for every layer: the uniform case
    config.mask = groups[0].mask;
    config.k_format = groups[0].k_format;
    config.v_format = groups[0].v_format;
    config.layer_groups.clear();
    return;
  }
  config.layer_groups = std::move(groups);
}

}  // namespace kvcache::detail
