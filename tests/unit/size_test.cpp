#include <cstdint>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "kvcache/config.hpp"

namespace kvcache {
namespace {

constexpr std::uint64_t kKiB = 1ULL << 10;
constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::uint64_t kGiB = 1ULL << 30;
constexpr std::uint64_t kTiB = 1ULL << 40;

// The message of the Error that parse_size throws for `text`.
std::string size_error(const std::string& text) {
  try {
    parse_size(text);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::invalid_argument) << text;
    return e.what();
  }
  ADD_FAILURE() << "parse_size('" << text << "') did not throw";
  return "";
}

TEST(ParseSize, BinaryUnits) {
  EXPECT_EQ(parse_size("2GiB"), 2 * kGiB);
  EXPECT_EQ(parse_size("512 MiB"), 512 * kMiB);
  EXPECT_EQ(parse_size("1KiB"), kKiB);
  EXPECT_EQ(parse_size("3TiB"), 3 * kTiB);
  EXPECT_EQ(parse_size("10 B"), 10u);
}

TEST(ParseSize, DecimalUnits) {
  EXPECT_EQ(parse_size("1KB"), 1'000u);
  EXPECT_EQ(parse_size("1.5GB"), 1'500'000'000u);
  EXPECT_EQ(parse_size("2 MB"), 2'000'000u);
  EXPECT_EQ(parse_size("1TB"), 1'000'000'000'000u);
}

TEST(ParseSize, PlainNumberIsBytes) {
  EXPECT_EQ(parse_size("4096"), 4096u);
  EXPECT_EQ(parse_size("0"), 0u);
  EXPECT_EQ(parse_size("18446744073709551615"), std::numeric_limits<std::uint64_t>::max());
}

TEST(ParseSize, FractionsThatAreWholeBytes) {
  EXPECT_EQ(parse_size("1.5GiB"), 3 * kGiB / 2);
  EXPECT_EQ(parse_size("0.5KiB"), 512u);
  EXPECT_EQ(parse_size("1.25KiB"), 1280u);
  EXPECT_EQ(parse_size("2.000B"), 2u);
  // One byte written in MiB needs 20 decimals; it is still exact.
  EXPECT_EQ(parse_size("0.00000095367431640625MiB"), 1u);
}

TEST(ParseSize, SurroundingSpaceIsIgnored) {
  EXPECT_EQ(parse_size(" 16 KiB "), 16 * kKiB);
}

TEST(ParseSize, RejectsEmptyAndNonNumbers) {
  EXPECT_NE(size_error("").find("expected a size"), std::string::npos);
  EXPECT_NE(size_error("abc").find("expected a size"), std::string::npos);
  EXPECT_NE(size_error("GiB").find("expected a size"), std::string::npos);
  EXPECT_NE(size_error(".5GiB").find("expected a size"), std::string::npos);
  EXPECT_NE(size_error("1.GiB").find("expected a size"), std::string::npos);
}

TEST(ParseSize, RejectsNegative) {
  EXPECT_EQ(size_error("-1GiB"), "expected a non-negative size, got '-1GiB'");
}

TEST(ParseSize, RejectsBadUnitWithSuggestion) {
  const std::string message = size_error("2Gib");
  EXPECT_NE(message.find("unknown size unit 'Gib' in '2Gib'"), std::string::npos) << message;
  EXPECT_NE(message.find("(did you mean 'GiB'?)"), std::string::npos) << message;
  EXPECT_NE(message.find("expected one of B, KiB, MiB, GiB, TiB, KB, MB, GB, TB"),
            std::string::npos)
      << message;
  EXPECT_NE(size_error("2 gb").find("(did you mean 'GB'?)"), std::string::npos);
  EXPECT_NE(size_error("2 G").find("(did you mean 'GB'?)"), std::string::npos);
  EXPECT_EQ(size_error("2 furlongs").find("did you mean"), std::string::npos);
  EXPECT_NE(size_error("1e3").find("unknown size unit 'e3'"), std::string::npos);
}

TEST(ParseSize, RejectsFractionalBytes) {
  EXPECT_EQ(size_error("1.3B"), "size '1.3B' is not a whole number of bytes");
  EXPECT_EQ(size_error("1.5"), "size '1.5' is not a whole number of bytes");
  EXPECT_EQ(size_error("0.0001KB"), "size '0.0001KB' is not a whole number of bytes");
}

TEST(ParseSize, RejectsOverflow) {
  EXPECT_NE(size_error("18446744073709551616").find("too large"), std::string::npos);
  EXPECT_NE(size_error("99999999TiB").find("too large"), std::string::npos);
  EXPECT_NE(size_error("16777215.99999999999TiB").find("not a whole number"), std::string::npos);
  EXPECT_NE(size_error("16777216TiB").find("too large"), std::string::npos);
  // The fraction alone pushes it over: 18446744073709551 KB leaves 615 bytes of headroom.
  EXPECT_EQ(parse_size("18446744073709551.6KB"), 18446744073709551600u);
  EXPECT_NE(size_error("18446744073709551.7KB").find("too large"), std::string::npos);
}

TEST(FormatSize, ExactBinaryUnit) {
  EXPECT_EQ(format_size(2 * kGiB), "2GiB");
  EXPECT_EQ(format_size(512 * kMiB), "512MiB");
  EXPECT_EQ(format_size(3 * kGiB / 2), "1536MiB");
  EXPECT_EQ(format_size(kTiB), "1TiB");
  EXPECT_EQ(format_size(kKiB), "1KiB");
}

TEST(FormatSize, OtherwiseBytes) {
  EXPECT_EQ(format_size(0), "0B");
  EXPECT_EQ(format_size(4097), "4097B");
  EXPECT_EQ(format_size(1'000'000'000), "1000000000B");
}

TEST(FormatSize, ParsesBack) {
  for (const std::uint64_t bytes : {std::uint64_t{0}, std::uint64_t{1}, 4097 * kKiB, 7 * kTiB,
                                    std::numeric_limits<std::uint64_t>::max()}) {
    EXPECT_EQ(parse_size(format_size(bytes)), bytes) << format_size(bytes);
  }
}

}  // namespace
}  // namespace kvcache
