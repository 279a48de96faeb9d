// Reference encode/decode: plain loops, written to be obviously right rather than fast.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kvcache/formats.hpp"
#include "kvcache/numeric.hpp"

namespace kvcache::reference {
namespace {

template <class T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <class T>
void store(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

float max_abs(std::span<const float> x) {
  float m = 0.0f;
  for (float v : x) m = std::max(m, std::fabs(v));
  return m;
}

}  // namespace

void encode(const FormatSpec& spec, std::span<const float> x, std::byte* codes, std::byte* meta) {
  const std::size_t d = x.size();
  switch (spec.kind) {
    case FormatKind::fp32:
      std::memcpy(codes, x.data(), d * sizeof(float));
      return;
    case FormatKind::fp16:
      for (std::size_t i = 0; i < d; ++i) store(codes + 2 * i, fp16_from_float(x[i]));
      return;
    case FormatKind::bf16:
      for (std::size_t i = 0; i < d; ++i) store(codes + 2 * i, bf16_from_float(x[i]));
      return;
    case FormatKind::fp8_e4m3: {
      const float scale = std::max(max_abs(x) / kFp8E4M3Max, 1e-12f);
      store(meta, scale);
      for (std::size_t i = 0; i < d; ++i) store(codes + i, fp8_e4m3_from_float(x[i] / scale));
      return;
    }
    case FormatKind::int8_per_token: {
      // Exactly the seed's KVCacheQuantizer, in fp32, with a true division.
      const float scale = std::max(max_abs(x) / 127.0f, 1e-8f);
      store(meta, scale);
      for (std::size_t i = 0; i < d; ++i) {
        const float q = std::clamp(std::nearbyint(x[i] / scale), -128.0f, 127.0f);
        store(codes + i, static_cast<std::int8_t>(q));
      }
      return;
    }
    case FormatKind::int4_group: {
      const std::size_t g = spec.group;
      std::memset(codes, 0, d / 2);
      for (std::size_t start = 0; start < d; start += g) {
        const auto group = x.subspan(start, g);
        const auto [lo, hi] = std::minmax_element(group.begin(), group.end());
        // Quantize with the fp16-rounded scale and minimum that decode will see.
        const std::uint16_t scale16 = fp16_from_float((*hi - *lo) / 15.0f);
        const std::uint16_t min16 = fp16_from_float(*lo);
        store(meta + start / g * 4, scale16);
        store(meta + start / g * 4 + 2, min16);
        const float scale = float_from_fp16(scale16);
        const float minimum = float_from_fp16(min16);
        for (std::size_t i = start; i < start + g; ++i) {
          const float q = scale > 0.0f ? std::nearbyint((x[i] - minimum) / scale) : 0.0f;
          const auto code = static_cast<std::uint8_t>(std::clamp(q, 0.0f, 15.0f));
          codes[i / 2] |= static_cast<std::byte>(i % 2 == 0 ? code : code << 4);
        }
      }
      return;
    }
  }
}

void decode(const FormatSpec& spec, const std::byte* codes, const std::byte* meta,
            std::span<float> out) {
  const std::size_t d = out.size();
  switch (spec.kind) {
    case FormatKind::fp32:
      std::memcpy(out.data(), codes, d * sizeof(float));
      return;
    case FormatKind::fp16:
      for (std::size_t i = 0; i < d; ++i) out[i] = float_from_fp16(load<std::uint16_t>(codes + 2 * i));
      return;
    case FormatKind::bf16:
      for (std::size_t i = 0; i < d; ++i) out[i] = float_from_bf16(load<std::uint16_t>(codes + 2 * i));
      return;
    case FormatKind::fp8_e4m3: {
      const float scale = load<float>(meta);
      for (std::size_t i = 0; i < d; ++i)
        out[i] = float_from_fp8_e4m3(load<std::uint8_t>(codes + i)) * scale;
      return;
    }
    case FormatKind::int8_per_token: {
      const float scale = load<float>(meta);
      for (std::size_t i = 0; i < d; ++i) out[i] = static_cast<float>(load<std::int8_t>(codes + i)) * scale;
      return;
    }
    case FormatKind::int4_group: {
      const std::size_t g = spec.group;
      for (std::size_t i = 0; i < d; ++i) {
        const float scale = float_from_fp16(load<std::uint16_t>(meta + i / g * 4));
        const float minimum = float_from_fp16(load<std::uint16_t>(meta + i / g * 4 + 2));
        const auto byte = load<std::uint8_t>(codes + i / 2);
        const int code = i % 2 == 0 ? (byte & 0xF) : (byte >> 4);
        out[i] = static_cast<float>(code) * scale + minimum;
      }
      return;
    }
  }
}

}  // namespace kvcache::reference
