// A component's options: its config section minus `name`, as JSON. Typed getters give errors that
// name the option and what was expected; only() rejects unknown options with a suggestion.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvcache/nearest_name.hpp"
#include "kvcache/status.hpp"

namespace kvcache::sdk {

class Options {
 public:
  Options() = default;
  explicit Options(nlohmann::json json) : json_(std::move(json)) {
    if (json_.is_null()) json_ = nlohmann::json::object();
    if (!json_.is_object()) throw Error(Code::invalid_argument, "options must be a mapping");
  }
  static Options parse(const char* text) {
    try {
      return Options(nlohmann::json::parse(text ? text : "{}"));
    } catch (const nlohmann::json::exception& e) {
      throw Error(Code::invalid_argument, std::string("options are not valid JSON: ") + e.what());
    }
  }

  bool has(std::string_view key) const { return json_.contains(std::string(key)); }

  // The value of `key`, or `fallback` when absent. Integers must be whole and in range.
  template <class T>
  T get(std::string_view key, T fallback) const {
    return has(key) ? require<T>(key) : fallback;
  }

  template <class T>
  T require(std::string_view key) const {
    const std::string k(key);
    if (!json_.contains(k)) throw Error(Code::invalid_argument, "missing option '" + k + "'");
    const nlohmann::json& v = json_.at(k);
    if constexpr (std::is_same_v<T, bool>) {
      if (v.is_boolean()) return v.get<bool>();
      fail(k, "true or false", v);
    } else if constexpr (std::is_integral_v<T>) {
      if (v.is_number_unsigned() && std::in_range<T>(v.get<std::uint64_t>()))
        return static_cast<T>(v.get<std::uint64_t>());
      if (v.is_number_integer() && !v.is_number_unsigned() &&
          std::in_range<T>(v.get<std::int64_t>()))
        return static_cast<T>(v.get<std::int64_t>());
      fail(k, "an integer in range", v);
    } else if constexpr (std::is_floating_point_v<T>) {
      if (v.is_number()) return v.get<T>();
      fail(k, "a number", v);
    } else {
      if (v.is_string()) return v.get<std::string>();
      fail(k, "a string", v);
    }
  }

  // A string option that names one of `choices` (`fallback` when absent); another value is refused
  // with the nearest choice.
  std::string one_of(std::string_view key, std::string fallback,
                     std::initializer_list<std::string_view> choices) const {
    const std::string value = get<std::string>(key, std::move(fallback));
    const std::vector<std::string> names(choices.begin(), choices.end());
    if (std::find(names.begin(), names.end(), value) != names.end()) return value;
    throw Error(Code::invalid_argument, "option '" + std::string(key) + "': '" + value +
                                            "' is not one of " + name_list(names) +
                                            did_you_mean(value, names));
  }

  // Throws for any option not in `known`, suggesting the nearest known one.
  void only(std::initializer_list<std::string_view> known) const {
    const std::vector<std::string> names(known.begin(), known.end());
    for (const auto& [key, value] : json_.items()) {
      if (std::find(names.begin(), names.end(), key) != names.end()) continue;
      throw Error(Code::invalid_argument,
                  "unknown option '" + key + "'" + did_you_mean(key, names) +
                      (names.empty() ? "; this component takes no options"
                                     : "; valid options: " + name_list(names)));
    }
  }

  const nlohmann::json& json() const { return json_; }

 private:
  [[noreturn]] static void fail(const std::string& key, const char* expected,
                                const nlohmann::json& got) {
    throw Error(Code::invalid_argument,
                "option '" + key + "': expected " + expected + ", got " + got.dump());
  }

  nlohmann::json json_ = nlohmann::json::object();
};

}  // namespace kvcache::sdk
