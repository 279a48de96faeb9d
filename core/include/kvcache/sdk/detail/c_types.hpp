// C++ value types and their C ABI twins, both ways (used by plugins and by the host).
#pragma once

#include "kvcache/plugin_abi.h"
#include "kvcache/quantizer.hpp"

namespace kvcache::sdk::detail {

// Desc: kvc_format_desc, or its frozen ABI 1.0 part that kvc_store_info embeds.
template <class Desc = kvc_format_desc>
Desc to_c(const TileLayout& f) {
  return {sizeof(Desc),     f.code_bits,           static_cast<std::uint32_t>(f.granularity),
          f.group_size,     f.symmetric ? 1u : 0u, f.scale_dtype,
          f.tile_bytes,     f.code_bytes,          f.slot_code_bytes,
          f.slot_meta_bytes};
}

template <class Desc>
TileLayout from_c(const Desc& d) {
  return {d.code_bits,      static_cast<Granularity>(d.granularity),
          d.group_size,     d.symmetric != 0,
          d.scale_dtype,    d.tile_bytes,
          d.code_bytes,     d.slot_code_bytes,
          d.slot_meta_bytes};
}

}  // namespace kvcache::sdk::detail
