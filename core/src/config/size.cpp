// Sizes with units, as people write them in configs and on the command line.
#include <array>
#include <cctype>
#include <cstdint>
#include <limits>
#include <ranges>
#include <string>
#include <string_view>

#include "kvcache/config.hpp"
#include "kvcache/nearest_name.hpp"

namespace kvcache {
namespace {

struct Unit {
  std::string_view name;
  std::uint64_t bytes;
};

// "B" last: as a suggestion it is the least likely meant ("2 G" should suggest GB, not B).
constexpr std::array<Unit, 9> kUnits = {{
    {"KiB", 1ULL << 10},
    {"MiB", 1ULL << 20},
    {"GiB", 1ULL << 30},
    {"TiB", 1ULL << 40},
    {"KB", 1'000ULL},
    {"MB", 1'000'000ULL},
    {"GB", 1'000'000'000ULL},
    {"TB", 1'000'000'000'000ULL},
    {"B", 1},
}};

constexpr std::string_view kUnitList = "B, KiB, MiB, GiB, TiB, KB, MB, GB, TB";
constexpr std::string_view kExpected =
    "expected a size such as 2GiB, 512 MiB, 1.5GB or 4096 (bytes)";

[[noreturn]] void fail(const std::string& message) {
  throw Error(Code::invalid_argument, message);
}

bool is_digit(char c) {
  return std::isdigit(static_cast<unsigned char>(c)) != 0;
}
bool is_space(char c) {
  return c == ' ' || c == '\t';
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

// Parses a run of decimal digits; false on overflow.
bool parse_digits(std::string_view digits, std::uint64_t& value) {
  value = 0;
  for (const char c : digits) {
    if (__builtin_mul_overflow(value, 10, &value) ||
        __builtin_add_overflow(value, static_cast<std::uint64_t>(c - '0'), &value)) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::uint64_t parse_size(std::string_view text) {
  const std::string shown(text);
  const std::string_view trimmed = trim(text);
  if (trimmed.empty()) fail(std::string(kExpected) + ", got '" + shown + "'");
  if (trimmed.front() == '-') fail("expected a non-negative size, got '" + shown + "'");

  std::size_t i = 0;
  while (i < trimmed.size() && is_digit(trimmed[i])) ++i;
  const std::string_view whole_digits = trimmed.substr(0, i);
  std::string_view fraction_digits;
  if (i < trimmed.size() && trimmed[i] == '.') {
    const std::size_t start = ++i;
    while (i < trimmed.size() && is_digit(trimmed[i])) ++i;
    fraction_digits = trimmed.substr(start, i - start);
    if (fraction_digits.empty()) fail(std::string(kExpected) + ", got '" + shown + "'");
  }
  if (whole_digits.empty()) fail(std::string(kExpected) + ", got '" + shown + "'");
  const std::string_view unit_name = trim(trimmed.substr(i));

  std::uint64_t unit_bytes = 1;
  if (!unit_name.empty()) {
    const Unit* unit = nullptr;
    for (const Unit& candidate : kUnits) {
      if (candidate.name == unit_name) unit = &candidate;
    }
    if (unit == nullptr) {
      fail("unknown size unit '" + std::string(unit_name) + "' in '" + shown + "'" +
           did_you_mean(unit_name, kUnits | std::views::transform(&Unit::name)) +
           "; expected one of " + std::string(kUnitList));
    }
    unit_bytes = unit->bytes;
  }

  const std::string too_large = "size '" + shown + "' is too large (at most " +
                                std::to_string(std::numeric_limits<std::uint64_t>::max()) +
                                " bytes)";
  std::uint64_t whole = 0;
  if (!parse_digits(whole_digits, whole) || __builtin_mul_overflow(whole, unit_bytes, &whole)) {
    fail(too_large);
  }

  // fraction * unit, digit by digit from the last: after each step `exact` is the value of the
  // digits so far (0.d_i...d_k) times unit_bytes, below unit_bytes so nothing overflows. A step
  // that is not a multiple of 10 leaves a fraction of a byte that no earlier digit can cancel.
  std::uint64_t exact = 0;
  for (auto digit = fraction_digits.rbegin(); digit != fraction_digits.rend(); ++digit) {
    const std::uint64_t scaled = static_cast<std::uint64_t>(*digit - '0') * unit_bytes + exact;
    if (scaled % 10 != 0) fail("size '" + shown + "' is not a whole number of bytes");
    exact = scaled / 10;
  }
  std::uint64_t total = 0;
  if (__builtin_add_overflow(whole, exact, &total)) fail(too_large);
  return total;
}

std::string format_size(std::uint64_t bytes) {
  if (bytes != 0) {
    for (int shift = 40; shift >= 10; shift -= 10) {
      const std::uint64_t unit = 1ULL << shift;
      if (bytes % unit == 0) {
        static constexpr std::array<std::string_view, 4> kNames = {"KiB", "MiB", "GiB", "TiB"};
        return std::to_string(bytes / unit) + std::string(kNames[shift / 10 - 1]);
      }
    }
  }
  return std::to_string(bytes) + "B";
}

}  // namespace kvcache
