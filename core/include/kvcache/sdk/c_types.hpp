// C++ value types written into their C ABI twins (plugin side).
#pragma once

#include "kvcache/plugin_abi.h"
#include "kvcache/quantizer.hpp"

namespace kvcache::sdk::detail {

inline kvc_format_desc to_c(const StorageFormat& f) {
  return {sizeof(kvc_format_desc),
          f.code_bits,
          static_cast<std::uint32_t>(f.granularity),
          f.group_size,
          f.symmetric ? 1u : 0u,
          f.scale_dtype,
          f.tile_bytes,
          f.code_bytes,
          f.slot_code_bytes,
          f.slot_meta_bytes};
}

}  // namespace kvcache::sdk::detail
