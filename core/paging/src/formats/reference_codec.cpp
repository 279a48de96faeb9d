// Reference encode/decode: plain loops, written to be obviously right rather than fast.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kvcache/formats.hpp"
#include "kvcache/numeric.hpp"
#include "kvcache/status.hpp"

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

// Asymmetric quantization of n values with stride: fp16 scale and minimum, codes of `bits`.
void quantize_asymmetric(const float* x, std::size_t n, std::size_t stride, int bits,
                         std::byte* meta, std::byte* codes, std::size_t code_index,
                         std::size_t code_stride) {
  float lo = x[0], hi = x[0];
  for (std::size_t i = 1; i < n; ++i)
    lo = std::min(lo, x[i * stride]), hi = std::max(hi, x[i * stride]);
  const float levels = static_cast<float>((1 << bits) - 1);
  // Quantize with the fp16-rounded scale and minimum that decode will see.
  const std::uint16_t scale16 = fp16_from_float((hi - lo) / levels);
  const std::uint16_t min16 = fp16_from_float(lo);
  store(meta, scale16);
  store(meta + 2, min16);
  const float scale = float_from_fp16(scale16);
  const float minimum = float_from_fp16(min16);
  const int per_byte = 8 / bits;
  for (std::size_t i = 0; i < n; ++i) {
    const float q = scale > 0.0f ? std::nearbyint((x[i * stride] - minimum) / scale) : 0.0f;
    const auto code = static_cast<std::uint8_t>(std::clamp(q, 0.0f, levels));
    const std::size_t c = code_index + i * code_stride;  // element index in code units
    codes[c / per_byte] |= static_cast<std::byte>(code << (bits * (c % per_byte)));
  }
}

// Element i of packed codes of `bits` bits, lowest bits first.
int code_at(const std::byte* codes, std::size_t i, int bits) {
  const int per_byte = 8 / bits;
  return (static_cast<int>(codes[i / per_byte]) >> (bits * (i % per_byte))) & ((1 << bits) - 1);
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
      std::memset(codes, 0, d / 2);
      for (std::size_t start = 0; start < d; start += spec.group)
        quantize_asymmetric(x.data() + start, spec.group, 1, 4, meta + start / spec.group * 4,
                            codes, start, 1);
      return;
    }
    case FormatKind::kivi_k:
      throw Error(Code::invalid_argument, "kivi-k encodes whole groups of tokens (encode_group)");
    case FormatKind::external:
      throw Error(Code::invalid_argument, "an external format encodes with its own codec");
  }
}

void encode_group(const FormatSpec& spec, std::span<const float> rows, std::uint32_t head_dim,
                  std::byte* codes, std::byte* meta) {
  if (!spec.groups_tokens() || rows.size() != std::size_t{spec.group} * head_dim)
    throw Error(Code::invalid_argument, "encode_group takes one whole group of a kivi-k format");
  // Slot t's codes are row t: element (t, c) is at t * head_dim + c in code units.
  std::memset(codes, 0, std::size_t{spec.group} * head_dim * spec.bits / 8);
  for (std::uint32_t c = 0; c < head_dim; ++c)
    quantize_asymmetric(rows.data() + c, spec.group, head_dim, static_cast<int>(spec.bits),
                        meta + std::size_t{c} * 4, codes, c, head_dim);
}

void decode(const FormatSpec& spec, const std::byte* codes, const std::byte* meta,
            std::span<float> out) {
  const std::size_t d = out.size();
  switch (spec.kind) {
    case FormatKind::fp32:
      std::memcpy(out.data(), codes, d * sizeof(float));
      return;
    case FormatKind::fp16:
      for (std::size_t i = 0; i < d; ++i)
        out[i] = float_from_fp16(load<std::uint16_t>(codes + 2 * i));
      return;
    case FormatKind::bf16:
      for (std::size_t i = 0; i < d; ++i)
        out[i] = float_from_bf16(load<std::uint16_t>(codes + 2 * i));
      return;
    case FormatKind::fp8_e4m3: {
      const float scale = load<float>(meta);
      for (std::size_t i = 0; i < d; ++i)
        out[i] = float_from_fp8_e4m3(load<std::uint8_t>(codes + i)) * scale;
      return;
    }
    case FormatKind::int8_per_token: {
      const float scale = load<float>(meta);
      for (std::size_t i = 0; i < d; ++i)
        out[i] = static_cast<float>(load<std::int8_t>(codes + i)) * scale;
      return;
    }
    case FormatKind::int4_group:
    case FormatKind::kivi_k: {
      // int4-group: one (scale, minimum) per group of elements; kivi-k: one per channel.
      const bool per_channel = spec.kind == FormatKind::kivi_k;
      const int bits = per_channel ? static_cast<int>(spec.bits) : 4;
      for (std::size_t i = 0; i < d; ++i) {
        const std::byte* m = meta + (per_channel ? i : i / spec.group) * 4;
        const float scale = float_from_fp16(load<std::uint16_t>(m));
        const float minimum = float_from_fp16(load<std::uint16_t>(m + 2));
        out[i] = static_cast<float>(code_at(codes, i, bits)) * scale + minimum;
      }
      return;
    }
    case FormatKind::external:
      throw Error(Code::invalid_argument, "an external format decodes with its own codec");
  }
}

}  // namespace kvcache::reference
