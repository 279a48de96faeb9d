#include "kvcache/rope.hpp"

#include <cmath>
#include <numbers>

#include "kvcache/status.hpp"

namespace kvcache {

std::string to_string(RopeStyle style) {
  return style == RopeStyle::gptj ? "gptj" : "neox";
}

std::string to_string(RopeScaling::Kind kind) {
  switch (kind) {
    case RopeScaling::Kind::linear:
      return "linear";
    case RopeScaling::Kind::llama3:
      return "llama3";
    default:
      return "none";
  }
}

std::vector<double> rope_frequencies(const Rope& rope, std::uint32_t head_dim) {
  const std::uint32_t dims = rope.rotary_dims(head_dim);
  if (dims == 0 || dims % 2 != 0 || dims > head_dim)
    throw Error(Code::invalid_argument, "rope.dims must be even and at most head_dim (" +
                                            std::to_string(head_dim) + "), got " +
                                            std::to_string(dims));
  const RopeScaling& s = rope.scaling;
  std::vector<double> f(dims / 2);
  for (std::uint32_t i = 0; i < dims / 2; ++i) {
    f[i] = std::pow(rope.theta, -2.0 * i / dims);
    if (s.kind == RopeScaling::Kind::linear) f[i] /= s.factor;
    if (s.kind == RopeScaling::Kind::llama3) {
      // Llama 3.1: long wavelengths slowed by `factor`, short ones kept, those between blended.
      const double wavelength = 2.0 * std::numbers::pi / f[i];
      const double low = s.original_context / s.low_freq_factor;
      const double high = s.original_context / s.high_freq_factor;
      if (wavelength > low) {
        f[i] /= s.factor;
      } else if (wavelength >= high) {
        const double smooth = (s.original_context / wavelength - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        f[i] = (1.0 - smooth) * f[i] / s.factor + smooth * f[i];
      }
    }
  }
  return f;
}

void rope_rotate(const Rope& rope, std::span<const double> frequencies, double positions,
                 std::span<float> row) {
  const std::size_t half = frequencies.size();
  for (std::size_t i = 0; i < half; ++i) {
    const std::size_t a = rope.style == RopeStyle::neox ? i : 2 * i;
    const std::size_t b = rope.style == RopeStyle::neox ? i + half : 2 * i + 1;
    const double angle = positions * frequencies[i], c = std::cos(angle), s = std::sin(angle);
    const double x = row[a], y = row[b];
    row[a] = static_cast<float>(x * c - y * s);
    row[b] = static_cast<float>(y * c + x * s);
  }
}

}  // namespace kvcache
