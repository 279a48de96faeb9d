// Typed reading of yaml-cpp nodes for the config. A failed read records an error Diagnostic and
// returns nothing, so one pass over a file reports every problem in it rather than the first.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "kvcache/config.hpp"

namespace kvcache::detail {

// A value to read: its node, where it is, and its dotted key ("cache.page_size") for messages.
// Values from the environment are scalar nodes made in code, located at the variable.
struct Field {
  YAML::Node node;
  SourceLocation where;
  std::string key;
};

// What a node is, for "got ..." in messages: "'abc'", "a list", "a mapping", "an empty value".
std::string describe(const YAML::Node& node);

// The JSON value of a plain (unquoted) scalar: an integer if it parses as one, then a finite
// double, then a bool (true/false), else the string itself.
nlohmann::json scalar_to_json(std::string_view text);

class YamlReader {
 public:
  // `origin` names the document the nodes came from (a file path, "<embedded default>").
  YamlReader(std::string origin, std::vector<Diagnostic>& diagnostics);

  // The one document of `text`, or nullopt with the error reported: text that is not UTF-8 (at
  // the byte), YAML that does not parse, several documents. A null node for an empty text.
  std::optional<YAML::Node> load(std::string_view text);

  // 1-based location of a parsed node; line 0 for nodes made in code.
  SourceLocation where(const YAML::Node& node) const { return where(node.Mark()); }
  SourceLocation where(const YAML::Mark& mark) const;
  Field root(const YAML::Node& node) const { return {node, where(node), ""}; }

  void error(const SourceLocation& where, const std::string& key, std::string message);
  void error(const Field& field, std::string message) { error(field.where, field.key, message); }

  // Calls visit(key, value) for each entry of a mapping. With `known` non-empty, a key outside
  // it is an error naming the nearest known key. Reports a non-mapping and non-scalar or
  // duplicate keys. False if the node is not a mapping.
  bool for_each_entry(const Field& map, std::initializer_list<std::string_view> known,
                      const std::function<void(const std::string& key, const Field&)>& visit);
  // The items of a sequence, keyed "key[i]"; nullopt (and an error) if it is not one.
  std::optional<std::vector<Field>> items(const Field& list, std::string_view what);

  std::optional<std::uint32_t> positive_int(const Field& field);
  std::optional<bool> boolean(const Field& field);
  // A finite number greater than zero.
  std::optional<double> positive_number(const Field& field);
  // A non-empty string scalar; `what` describes it ("a name", "a path").
  std::optional<std::string> text(const Field& field, std::string_view what);
  // A size as parse_size reads it: "2GiB", "512 MiB", or an integer of bytes.
  std::optional<std::uint64_t> size(const Field& field);
  // Any value as JSON (scalars by scalar_to_json unless quoted; lists and mappings nested).
  std::optional<nlohmann::json> json(const Field& field);
  // A component, "NAME" or {name: NAME, <options>}: replaces the whole of `choice` and returns
  // true, or reports what is wrong and leaves it.
  bool component(const Field& field, ComponentChoice& choice);

 private:
  std::vector<Field> elements(const Field& sequence) const;

  std::string origin_;
  std::vector<Diagnostic>& diagnostics_;
};

}  // namespace kvcache::detail
