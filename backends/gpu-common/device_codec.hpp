// The storage formats on the device: encode one token-head row into its slot and read elements
// back, for the tile layout of kvcache/formats.hpp. Written once for the host and both GPU
// compilers (no standard library, no intrinsics), so the unit tests run these very functions on
// the CPU against the reference codec, byte for byte, on machines without a GPU.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define KVC_HD __host__ __device__ inline
#else
#define KVC_HD inline
#endif

namespace kvcache::gpu {

// The numbers of kvcache::FormatKind (checked where a DeviceFormat is made).
enum DeviceFormatKind : std::uint32_t {
  kFp32 = 0,
  kFp16 = 1,
  kBf16 = 2,
  kFp8E4M3 = 3,
  kInt8PerToken = 4,
  kInt4Group = 5,
  kKiviK = 6,
};

// A format's layout in the plain numbers a kernel needs.
struct DeviceFormat {
  std::uint32_t kind = kFp16;
  std::uint32_t group = 32;  // int4-group: elements per (scale, minimum); kivi-k: tokens
  std::uint32_t bits = 4;    // kivi-k: 4 or 2
  std::uint32_t slot_code_bytes = 0;
  std::uint32_t slot_meta_bytes = 0;
  std::uint64_t code_bytes = 0;  // all slots' codes; the meta follows
  std::uint64_t tile_bytes = 0;

  // Tiles lie tile_bytes rounded up to 16 apart, so each starts on the kernels' vector loads'
  // boundary.
  KVC_HD std::uint64_t tile_stride() const { return (tile_bytes + 15) / 16 * 16; }
};

KVC_HD std::uint32_t float_bits(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}
KVC_HD float bits_float(std::uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}
KVC_HD float max_of(float a, float b) {
  return a > b ? a : b;
}
KVC_HD float min_of(float a, float b) {
  return a < b ? a : b;
}
KVC_HD float clamp_to(float x, float lo, float hi) {
  return min_of(max_of(x, lo), hi);
}

// IEEE binary16, round to nearest even (a NaN stays a quiet NaN).
KVC_HD std::uint16_t fp16_bits(float x) {
  const std::uint32_t b = float_bits(x);
  const auto sign = static_cast<std::uint16_t>((b >> 16) & 0x8000u);
  const std::uint32_t a = b & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  if (a >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // rounds to infinity
  if (a < 0x38800000u)  // below 2^-14: a subnormal half, in units of 2^-24 (exact scaling)
    return static_cast<std::uint16_t>(
        sign | static_cast<std::uint32_t>(rintf(bits_float(a) * 16777216.0f)));
  const std::uint32_t rounded = a + 0xFFFu + ((a >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}
KVC_HD float fp16_value(std::uint16_t h) {
  const std::uint32_t sign = (std::uint32_t{h} & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0) return bits_float(sign | float_bits(static_cast<float>(m) * 5.9604644775390625e-8f));
  if (e == 31) return bits_float(sign | 0x7F800000u | (m << 13));
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

// bfloat16: the upper half of a float32, rounded to nearest even.
KVC_HD std::uint16_t bf16_bits(float x) {
  const std::uint32_t b = float_bits(x);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((b >> 16) | 0x0040u);
  return static_cast<std::uint16_t>((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}
KVC_HD float bf16_value(std::uint16_t h) {
  return bits_float(std::uint32_t{h} << 16);
}

// OCP FP8 E4M3: saturates at +-448, 0x7F/0xFF are NaN.
KVC_HD std::uint8_t fp8_bits(float x) {
  const std::uint32_t b = float_bits(x);
  const auto sign = static_cast<std::uint8_t>((b >> 24) & 0x80u);
  const std::uint32_t a = b & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<std::uint8_t>(sign | 0x7Fu);
  if (bits_float(a) >= 448.0f) return static_cast<std::uint8_t>(sign | 0x7Eu);
  if (a < 0x3C800000u)  // below 2^-6: subnormal, in units of 2^-9 (8 units is the smallest normal)
    return static_cast<std::uint8_t>(sign |
                                     static_cast<std::uint32_t>(rintf(bits_float(a) * 512.0f)));
  const std::uint32_t rounded = a + 0x7FFFFu + ((a >> 20) & 1u);
  const std::uint32_t biased = (rounded >> 23) - 120u;  // exponent - 127 + 7
  return static_cast<std::uint8_t>(sign | (biased << 3) | ((rounded >> 20) & 7u));
}
KVC_HD float fp8_value(std::uint8_t c) {
  if ((c & 0x7Fu) == 0x7Fu) return bits_float(0x7FC00000u);
  const std::uint32_t biased = (c >> 3) & 0xFu, m = c & 7u;
  const float magnitude = biased == 0 ? static_cast<float>(m) * 0.001953125f
                                      : bits_float(((biased + 120u) << 23) | (m << 20));
  return (c & 0x80u) ? -magnitude : magnitude;
}

KVC_HD std::uint8_t* slot_codes(const DeviceFormat& f, std::uint8_t* tile, std::uint32_t slot) {
  return tile + std::uint64_t{slot} * f.slot_code_bytes;
}
KVC_HD std::uint8_t* slot_meta(const DeviceFormat& f, std::uint8_t* tile, std::uint32_t slot) {
  return tile + f.code_bytes + std::uint64_t{slot} * f.slot_meta_bytes;
}

// Encodes x[dim] into `slot` of `tile`, exactly as kvcache::reference::encode does (not kivi-k,
// whose scales span groups of tokens: see encode_group).
KVC_HD void encode_row(const DeviceFormat& f, const float* x, std::uint32_t dim, std::uint8_t* tile,
                       std::uint32_t slot) {
  std::uint8_t* codes = slot_codes(f, tile, slot);
  std::uint8_t* meta = slot_meta(f, tile, slot);
  switch (f.kind) {
    case kFp32:
      std::memcpy(codes, x, std::size_t{dim} * 4);
      return;
    case kFp16:
    case kBf16:
      for (std::uint32_t i = 0; i < dim; ++i) {
        const std::uint16_t h = f.kind == kFp16 ? fp16_bits(x[i]) : bf16_bits(x[i]);
        std::memcpy(codes + 2 * i, &h, 2);
      }
      return;
    case kFp8E4M3:
    case kInt8PerToken: {
      float top = 0.0f;
      for (std::uint32_t i = 0; i < dim; ++i) top = max_of(top, fabsf(x[i]));
      const bool fp8 = f.kind == kFp8E4M3;
      const float scale = fp8 ? max_of(top / 448.0f, 1e-12f) : max_of(top / 127.0f, 1e-8f);
      std::memcpy(meta, &scale, 4);
      for (std::uint32_t i = 0; i < dim; ++i)
        codes[i] = fp8 ? fp8_bits(x[i] / scale)
                       : static_cast<std::uint8_t>(static_cast<std::int8_t>(
                             clamp_to(rintf(x[i] / scale), -128.0f, 127.0f)));
      return;
    }
    case kInt4Group:
      for (std::uint32_t start = 0; start < dim; start += f.group) {
        float lo = x[start], hi = x[start];
        for (std::uint32_t i = start + 1; i < start + f.group; ++i)
          lo = min_of(lo, x[i]), hi = max_of(hi, x[i]);
        // Quantize with the fp16-rounded scale and minimum that decode will see.
        const std::uint16_t scale16 = fp16_bits((hi - lo) / 15.0f), min16 = fp16_bits(lo);
        std::uint8_t* m = meta + start / f.group * 4;
        std::memcpy(m, &scale16, 2);
        std::memcpy(m + 2, &min16, 2);
        const float scale = fp16_value(scale16), minimum = fp16_value(min16);
        for (std::uint32_t i = start; i < start + f.group; i += 2) {
          std::uint32_t pair = 0;
          for (std::uint32_t j = 0; j < 2; ++j) {
            const float q = scale > 0.0f ? rintf((x[i + j] - minimum) / scale) : 0.0f;
            pair |= static_cast<std::uint32_t>(clamp_to(q, 0.0f, 15.0f)) << (4 * j);
          }
          codes[i / 2] = static_cast<std::uint8_t>(pair);
        }
      }
      return;
    default:
      return;
  }
}

// For kivi-k: encodes rows[group][dim] (already rounded through fp16) into the group of slots
// starting at `first_slot`, exactly as kvcache::reference::encode_group does: per channel, an fp16
// scale and minimum over the group's tokens, and codes of `bits` bits (slot t, channel c at code
// index t * dim + c, lowest bits first).
KVC_HD void encode_group(const DeviceFormat& f, const float* rows, std::uint32_t dim,
                         std::uint8_t* tile, std::uint32_t first_slot) {
  std::uint8_t* codes = slot_codes(f, tile, first_slot);
  std::uint8_t* meta = tile + f.code_bytes + std::uint64_t{first_slot / f.group} * dim * 4;
  const std::uint32_t per_byte = 8 / f.bits;
  const float levels = static_cast<float>((1u << f.bits) - 1);
  for (std::uint64_t i = 0; i < std::uint64_t{f.group} * dim / per_byte; ++i) codes[i] = 0;
  for (std::uint32_t c = 0; c < dim; ++c) {
    float lo = rows[c], hi = rows[c];
    for (std::uint32_t t = 1; t < f.group; ++t)
      lo = min_of(lo, rows[t * dim + c]), hi = max_of(hi, rows[t * dim + c]);
    const std::uint16_t scale16 = fp16_bits((hi - lo) / levels), min16 = fp16_bits(lo);
    std::memcpy(meta + 4 * c, &scale16, 2);
    std::memcpy(meta + 4 * c + 2, &min16, 2);
    const float scale = fp16_value(scale16), minimum = fp16_value(min16);
    for (std::uint32_t t = 0; t < f.group; ++t) {
      const float q = scale > 0.0f ? rintf((rows[t * dim + c] - minimum) / scale) : 0.0f;
      const auto code = static_cast<std::uint32_t>(clamp_to(q, 0.0f, levels));
      const std::uint64_t index = std::uint64_t{t} * dim + c;
      codes[index / per_byte] = static_cast<std::uint8_t>(codes[index / per_byte] |
                                                          (code << (f.bits * (index % per_byte))));
    }
  }
}

// Reads one slot's elements: construct once per slot, then ask for elements.
struct SlotReader {
  const DeviceFormat* f;
  const std::uint8_t* codes;
  const std::uint8_t* meta;
  float scale = 1.0f;  // per-token scale of fp8 and int8

  KVC_HD SlotReader(const DeviceFormat& format, const std::uint8_t* tile, std::uint32_t slot)
      : f(&format),
        codes(tile + std::uint64_t{slot} * format.slot_code_bytes),
        meta(tile + format.code_bytes + std::uint64_t{slot} * format.slot_meta_bytes) {
    if (format.kind == kFp8E4M3 || format.kind == kInt8PerToken) std::memcpy(&scale, meta, 4);
    if (format.kind == kKiviK) {  // slot t's codes are row t of its group; meta per group
      const std::uint64_t dim = std::uint64_t{format.slot_code_bytes} * 8 / format.bits;
      meta = tile + format.code_bytes + std::uint64_t{slot / format.group} * dim * 4;
    }
  }

  KVC_HD float operator[](std::uint32_t i) const {
    switch (f->kind) {
      case kFp32: {
        float v;
        std::memcpy(&v, codes + 4 * i, 4);
        return v;
      }
      case kFp16:
      case kBf16: {
        std::uint16_t h;
        std::memcpy(&h, codes + 2 * i, 2);
        return f->kind == kFp16 ? fp16_value(h) : bf16_value(h);
      }
      case kFp8E4M3:
        return fp8_value(codes[i]) * scale;
      case kInt8PerToken:
        return static_cast<float>(static_cast<std::int8_t>(codes[i])) * scale;
      case kInt4Group: {
        const std::uint8_t* m = meta + i / f->group * 4;
        std::uint16_t s, lo;
        std::memcpy(&s, m, 2);
        std::memcpy(&lo, m + 2, 2);
        const auto code = static_cast<float>((codes[i / 2] >> (4 * (i % 2))) & 0xFu);
        return code * fp16_value(s) + fp16_value(lo);
      }
      case kKiviK: {
        const std::uint8_t* m = meta + 4 * i;
        std::uint16_t s, lo;
        std::memcpy(&s, m, 2);
        std::memcpy(&lo, m + 2, 2);
        const std::uint32_t per_byte = 8 / f->bits;
        const auto code = static_cast<float>((codes[i / per_byte] >> (f->bits * (i % per_byte))) &
                                             ((1u << f->bits) - 1));
        return code * fp16_value(s) + fp16_value(lo);
      }
      default:
        return 0.0f;
    }
  }
};

}  // namespace kvcache::gpu
