// C ABI value types read back into their C++ twins (host side).
#pragma once

#include "kvcache/plugin_abi.h"
#include "kvcache/quantizer.hpp"

namespace kvcache::plugin {

inline StorageFormat from_c(const kvc_format_desc& d) {
  return {d.code_bits,      static_cast<Granularity>(d.granularity),
          d.group_size,     d.symmetric != 0,
          d.scale_dtype,    d.tile_bytes,
          d.code_bytes,     d.slot_code_bytes,
          d.slot_meta_bytes};
}

}  // namespace kvcache::plugin
