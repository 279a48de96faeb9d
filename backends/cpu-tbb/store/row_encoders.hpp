// Vector encoders of one K or V row into a slot's codes and meta, byte for byte what
// kvcache::reference::encode writes. SlotCodec picks one for the CPU's vector family (its
// AVX-512 encoders live in slot_codec.cpp); a format without one is encoded by the reference.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/row_format.hpp"

namespace kvcache::cpu {

using RowEncoder = void (*)(const float* row, std::uint32_t head_dim, std::byte* codes,
                            std::byte* meta);

namespace avx2 {
// Rows of float16, int8 and int4 (groups of 32, 64, 128) at a head_dim that is a multiple of 8;
// null otherwise.
RowEncoder row_encoder(RowFormat kind, std::uint32_t head_dim);
}  // namespace avx2

}  // namespace kvcache::cpu
