#include "config/yaml_reader.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <utility>

#include <yaml-cpp/eventhandler.h>

#include "config/text_check.hpp"
#include "kvcache/nearest_name.hpp"

namespace kvcache::detail {
namespace {

std::string join_key(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

std::string listed(std::initializer_list<std::string_view> names) {
  std::string text;
  for (const std::string_view name : names) {
    if (!text.empty()) text += ", ";
    text += name;
  }
  return text;
}

// Parses all of `text` as a T, or nothing.
template <class T>
std::optional<T> parse_number(std::string_view text) {
  T value{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

// Counts the documents of a stream, up to two, building nothing. Not YAML::LoadAll: yaml-cpp 0.7
// (Debian 12) loops forever there on a stream such as ",}" (jbeder/yaml-cpp#1040, fixed upstream
// in #1319), reporting one empty document after another at the same place.
struct DocumentCounter : YAML::EventHandler {
  int documents = 0;
  YAML::Mark first, second;
  void OnDocumentStart(const YAML::Mark& mark) override {
    ++documents;
    (documents == 1 ? first : second) = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

SourceLocation location_of(std::string_view text, std::size_t offset, const std::string& origin) {
  const std::string_view before = text.substr(0, offset);
  const std::size_t line_start = before.rfind('\n');
  return {
      origin, static_cast<int>(std::count(before.begin(), before.end(), '\n')) + 1,
      static_cast<int>(offset - (line_start == std::string_view::npos ? 0 : line_start + 1)) + 1};
}

}  // namespace

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return "'" + node.Scalar() + "'";
    case YAML::NodeType::Sequence:
      return node.size() == 0 ? "an empty list" : "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    default:
      return "an empty value";
  }
}

nlohmann::json scalar_to_json(std::string_view text) {
  // YAML allows a leading '+' on numbers; from_chars does not.
  std::string_view number = text;
  if (number.size() > 1 && number[0] == '+' && number[1] != '-') number.remove_prefix(1);
  if (const auto value = parse_number<std::int64_t>(number)) return *value;
  if (const auto value = parse_number<std::uint64_t>(number)) return *value;
  if (const auto value = parse_number<double>(number); value && std::isfinite(*value)) {
    return *value;
  }
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  return std::string(text);
}

YamlReader::YamlReader(std::string origin, std::vector<Diagnostic>& diagnostics)
    : origin_(std::move(origin)), diagnostics_(diagnostics) {}

std::optional<YAML::Node> YamlReader::load(std::string_view text) {
  if (const auto fault = text_fault(text)) {
    char byte[8];
    std::snprintf(byte, sizeof(byte), "0x%02X",
                  static_cast<unsigned>(std::uint8_t(text[fault->at])));
    error(location_of(text, fault->at, origin_), "",
          std::string(fault->what) + " (byte " + byte + ")");
    return std::nullopt;
  }
  try {
    std::istringstream stream{std::string(text)};
    YAML::Parser parser(stream);
    DocumentCounter counter;
    while (counter.documents < 2 && parser.HandleNextDocument(counter)) {
    }
    if (counter.documents == 2) {
      error(where(counter.second), "",
            counter.second.pos == counter.first.pos
                ? "not YAML: nothing can begin with what is here"
                : "expected one YAML document, found several");
      return std::nullopt;
    }
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    error(where(e.mark), "", e.msg);
    return std::nullopt;
  }
}

SourceLocation YamlReader::where(const YAML::Mark& mark) const {
  if (mark.is_null()) return {origin_, 0, 0};
  return {origin_, mark.line + 1, mark.column + 1};
}

void YamlReader::error(const SourceLocation& where, const std::string& key, std::string message) {
  diagnostics_.push_back({Diagnostic::Severity::error, where, key, std::move(message)});
}

bool YamlReader::for_each_entry(
    const Field& map, std::initializer_list<std::string_view> known,
    const std::function<void(const std::string& key, const Field&)>& visit) {
  if (!map.node.IsMap()) {
    const std::string keys = known.size() == 0 ? "" : " with keys " + listed(known);
    error(map, "expected a mapping" + keys + ", got " + describe(map.node));
    return false;
  }
  std::vector<std::pair<std::string, SourceLocation>> seen;
  for (const auto& entry : map.node) {
    const SourceLocation key_where = where(entry.first);
    if (!entry.first.IsScalar()) {
      error(key_where, map.key, "expected a key name, got " + describe(entry.first));
      continue;
    }
    const std::string key = entry.first.Scalar();
    const auto first = std::find_if(seen.begin(), seen.end(),
                                    [&](const auto& previous) { return previous.first == key; });
    if (first != seen.end()) {
      error(key_where, map.key,
            "duplicate key '" + key + "' (first given on line " +
                std::to_string(first->second.line) + ")");
      continue;
    }
    seen.emplace_back(key, key_where);
    if (known.size() != 0 && std::find(known.begin(), known.end(), key) == known.end()) {
      const std::string hint = did_you_mean(key, known);
      error(key_where, map.key,
            "unknown key '" + key + "'" +
                (hint.empty() ? "; expected one of: " + listed(known) : hint));
      continue;
    }
    // An empty value has no position of its own in yaml-cpp; its key's is the useful one.
    const YAML::Node value = entry.second;
    visit(key, Field{value, value.IsNull() ? key_where : where(value), join_key(map.key, key)});
  }
  return true;
}

std::optional<std::vector<Field>> YamlReader::items(const Field& list, std::string_view what) {
  if (!list.node.IsSequence()) {
    error(list, "expected " + std::string(what) + ", got " + describe(list.node));
    return std::nullopt;
  }
  return elements(list);
}

std::vector<Field> YamlReader::elements(const Field& list) const {
  std::vector<Field> result;
  for (std::size_t i = 0; i < list.node.size(); ++i) {
    const YAML::Node item = list.node[i];
    result.push_back(
        {item, item.IsNull() ? list.where : where(item), list.key + "[" + std::to_string(i) + "]"});
  }
  return result;
}

std::optional<std::uint32_t> YamlReader::positive_int(const Field& field) {
  if (field.node.IsScalar()) {
    std::string_view digits = field.node.Scalar();
    if (digits.starts_with('+')) digits.remove_prefix(1);
    std::uint32_t value = 0;
    const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (ec == std::errc() && ptr == digits.data() + digits.size() && value > 0) return value;
    if (ec == std::errc::result_out_of_range) {
      error(field, "expected a positive integer up to " +
                       std::to_string(std::numeric_limits<std::uint32_t>::max()) + ", got " +
                       describe(field.node));
      return std::nullopt;
    }
  }
  error(field, "expected a positive integer, got " + describe(field.node));
  return std::nullopt;
}

std::optional<double> YamlReader::positive_number(const Field& field) {
  if (field.node.IsScalar()) {
    const nlohmann::json value = scalar_to_json(field.node.Scalar());
    if (value.is_number() && value.get<double>() > 0.0) return value.get<double>();
  }
  error(field, "expected a number greater than 0, got " + describe(field.node));
  return std::nullopt;
}

std::optional<bool> YamlReader::boolean(const Field& field) {
  if (field.node.IsScalar()) {
    const nlohmann::json value = scalar_to_json(field.node.Scalar());
    if (value.is_boolean()) return value.get<bool>();
  }
  error(field, "expected true or false, got " + describe(field.node));
  return std::nullopt;
}

std::optional<std::string> YamlReader::text(const Field& field, std::string_view what) {
  if (field.node.IsScalar() && !field.node.Scalar().empty()) return field.node.Scalar();
  error(field, "expected " + std::string(what) + ", got " + describe(field.node));
  return std::nullopt;
}

std::optional<std::uint64_t> YamlReader::size(const Field& field) {
  if (!field.node.IsScalar()) {
    error(field, "expected a size such as 2GiB or 4096 (bytes), got " + describe(field.node));
    return std::nullopt;
  }
  try {
    return parse_size(field.node.Scalar());
  } catch (const Error& e) {
    error(field, e.what());
    return std::nullopt;
  }
}

std::optional<nlohmann::json> YamlReader::json(const Field& field) {
  const YAML::Node& node = field.node;
  if (node.IsScalar()) {
    // Quoting (or an explicit !!str) keeps "16" a string.
    if (node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str") return node.Scalar();
    return scalar_to_json(node.Scalar());
  }
  if (node.IsNull()) return nullptr;
  bool ok = true;
  nlohmann::json result;
  if (node.IsSequence()) {
    result = nlohmann::json::array();
    for (const Field& item : elements(field)) {
      auto value = json(item);
      ok = ok && value.has_value();
      if (value) result.push_back(std::move(*value));
    }
  } else {
    result = nlohmann::json::object();
    for_each_entry(field, {}, [&](const std::string& key, const Field& value_field) {
      auto value = json(value_field);
      ok = ok && value.has_value();
      if (value) result[key] = std::move(*value);
    });
  }
  if (!ok) return std::nullopt;
  return result;
}

bool YamlReader::component(const Field& field, ComponentChoice& choice) {
  const std::string expected = "a name or a mapping with 'name' and options";
  if (field.node.IsScalar()) {
    auto name = text(field, "a name");
    if (name) choice = {.name = std::move(*name), .where = field.where};
    return name.has_value();
  }
  if (!field.node.IsMap()) {
    error(field, "expected " + expected + ", got " + detail::describe(field.node));
    return false;
  }
  ComponentChoice result;
  bool has_name = false;
  bool ok = true;
  for_each_entry(field, {}, [&](const std::string& key, const Field& value) {
    if (key == "name") {
      auto name = text(value, "a name");
      has_name = true;
      ok = ok && name.has_value();
      if (name) {
        result.name = std::move(*name);
        result.where = value.where;
      }
      return;
    }
    auto option = json(value);
    ok = ok && option.has_value();
    if (option) {
      result.options[key] = std::move(*option);
      result.option_where[key] = value.where;
    }
  });
  if (!has_name) error(field, "missing key 'name': expected " + expected);
  if (!has_name || !ok) return false;
  choice = std::move(result);
  return true;
}

}  // namespace kvcache::detail
