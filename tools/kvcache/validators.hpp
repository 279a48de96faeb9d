// Checks of numeric options with messages a user can act on ("--batch: expected a whole number
// from 1 to 4294967295, got '0'"), in place of CLI11's generic range text.
#pragma once

#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>

#include <CLI/CLI.hpp>

namespace kvcache::tool {

// A whole number in [min, max].
CLI::Validator whole_number(std::uint64_t min, std::uint64_t max);
// A finite number greater than zero.
CLI::Validator positive_real();

// Greater than zero and within the option's type: positive(option_variable).
template <class T>
CLI::Validator positive(const T&) {
  if constexpr (std::floating_point<T>) {
    return positive_real();
  } else {
    return whole_number(1, std::numeric_limits<T>::max());
  }
}
template <class T>
CLI::Validator positive(const std::optional<T>&) {
  return positive(T{});
}

}  // namespace kvcache::tool
