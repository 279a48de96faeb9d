// A built-in storage format as the kernels see it (host side): the layout of kvcache/formats.hpp
// in a DeviceFormat, or Error(unsupported) for a layout the kernels cannot address.
#pragma once

#include <string>

#include "device_codec.hpp"
#include "kvcache/formats.hpp"
#include "kvcache/status.hpp"

namespace kvcache::gpu {

static_assert(kFp32 == static_cast<std::uint32_t>(FormatKind::fp32) &&
              kFp16 == static_cast<std::uint32_t>(FormatKind::fp16) &&
              kBf16 == static_cast<std::uint32_t>(FormatKind::bf16) &&
              kFp8E4M3 == static_cast<std::uint32_t>(FormatKind::fp8_e4m3) &&
              kInt8PerToken == static_cast<std::uint32_t>(FormatKind::int8_per_token) &&
              kInt4Group == static_cast<std::uint32_t>(FormatKind::int4_group) &&
              kKiviK == static_cast<std::uint32_t>(FormatKind::kivi_k));

inline DeviceFormat device_format(const FormatSpec& spec, std::uint32_t head_dim,
                                  std::uint32_t page_size, const char* backend) {
  const TileLayout layout = format_layout(spec, head_dim, page_size);
  if (layout.code_bytes % 4 != 0)
    throw Error(Code::unsupported, std::string(backend) + " backend: " + spec.name() +
                                       " codes of a page must fill whole 4-byte words");
  return {static_cast<std::uint32_t>(spec.kind),
          spec.group,
          spec.bits,
          static_cast<std::uint32_t>(layout.slot_code_bytes),
          static_cast<std::uint32_t>(layout.slot_meta_bytes),
          layout.code_bytes,
          layout.tile_bytes};
}

}  // namespace kvcache::gpu
