// Every installed quantizer, loaded through the real loader, round-trips Gaussian data and data
// with outlier channels within its format's error bound. The measured errors are printed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "fixture.hpp"
#include "kvcache/formats.hpp"

namespace kvcache::conformance {
namespace {

constexpr std::uint32_t kDim = 128;
constexpr std::uint32_t kPage = 32;

// Largest |error| allowed, as a fraction of the largest |x| in the tile.
const std::map<std::string, double> kBound = {
    {"fp32", 0.0},
    {"fp16", 0x1p-11},
    {"bf16", 0x1p-8},
    {"fp8-e4m3", 0x1p-4},
    {"int8-per-token", 0.5 / 127 * 1.0001},
    {"int4-group", 0.07},
    {"kivi-k", 0.07},
};

// max: largest |error| over the tile's largest |x|; mean: mean |error| over mean |x|.
struct Errors {
  double max = 0.0;
  double mean = 0.0;
};

Errors round_trip(const Quantizer& q, const std::vector<float>& x) {
  std::vector<std::byte> tile(q.describe(kDim, kPage).tile_bytes);
  std::vector<float> back(x.size());
  std::int64_t shape[2] = {kPage, kDim};
  const DLTensor src = host_tensor(const_cast<float*>(x.data()), shape, 2);
  DLTensor dst = host_tensor(back.data(), shape, 2);
  q.encode(src, 0, kPage, tile.data());
  q.decode(tile.data(), 0, kPage, dst);
  double peak = 0.0, magnitude = 0.0, total = 0.0;
  Errors e;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double err = std::fabs(static_cast<double>(back[i]) - x[i]);
    peak = std::max(peak, static_cast<double>(std::fabs(x[i])));
    magnitude += std::fabs(x[i]);
    total += err;
    e.max = std::max(e.max, err);
  }
  e.max /= peak;
  e.mean = total / magnitude;
  return e;
}

TEST(FormatErrors, EveryQuantizerStaysWithinItsBound) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  std::vector<float> gaussian(kPage * kDim), outliers(kPage * kDim);
  for (std::size_t i = 0; i < gaussian.size(); ++i) {
    gaussian[i] = normal(rng);
    const std::size_t channel = i % kDim;
    outliers[i] = gaussian[i] * (channel == 5 || channel == 77 ? 20.0f : 1.0f);  // as in real keys
  }
  std::printf("%-16s %-10s %14s %14s\n", "format", "data", "max|e|/max|x|", "mean|e|/mean|x|");
  int tested = 0;
  for (const std::string& name : format_names()) {
    if (registry().find(ComponentKind::quantizer, name) == nullptr) continue;
    const auto q = registry().create_quantizer(name);
    for (const auto& [label, data] :
         {std::pair{"gaussian", &gaussian}, std::pair{"outliers", &outliers}}) {
      const Errors e = round_trip(*q, *data);
      std::printf("%-16s %-10s %14.3e %14.3e\n", name.c_str(), label, e.max, e.mean);
      EXPECT_LE(e.max, kBound.at(name)) << name << " on " << label;
    }
    ++tested;
  }
  EXPECT_EQ(tested, static_cast<int>(format_names().size()))
      << "every built-in format is installed";
}

TEST(FormatErrors, KiviTwoBitKeepsOutlierChannelsApart) {
  // Per-channel scales are KIVI's point: an outlier channel does not widen the others' steps.
  const auto kivi = registry().create_quantizer("kivi-k", {{"bits", 2}});
  const auto per_token = registry().create_quantizer("int4-group", {{"group", 128}});
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> x(kPage * kDim);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = normal(rng) * (i % kDim == 9 ? 50.0f : 1.0f);
  EXPECT_LT(round_trip(*kivi, x).mean, round_trip(*per_token, x).mean);
}

TEST(FormatErrors, KiviEncodesWholeGroupsOnly) {
  const auto kivi = registry().create_quantizer("kivi-k");
  std::vector<float> x(5 * kDim, 1.0f);
  std::vector<std::byte> tile(kivi->describe(kDim, kPage).tile_bytes);
  std::int64_t shape[2] = {5, kDim};
  try {
    kivi->encode(host_tensor(x.data(), shape, 2), 0, kPage, tile.data());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("whole groups of 32 tokens"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(kivi->describe(kDim, 16), Error);  // a group of 32 does not fit a page of 16
}

}  // namespace
}  // namespace kvcache::conformance
