// Storage formats with one flaw each, which a store must refuse when it is created (naming the
// format and the flaw) instead of failing in the middle of a step. Without a flaw the format is
// plain float32 rows, so the flaws are all that differ.
#include <cmath>
#include <cstring>

#include "kvcache/sdk/plugin.hpp"

namespace {

enum class Flaw { encode_throws, zero_tile, writes_past_tile, huge_tile, shared_slots, nan_decode };

template <Flaw F>
class Flawed final : public kvcache::Quantizer {
 public:
  explicit Flawed(const kvcache::sdk::Options&) {}

  kvcache::TileLayout describe(std::uint32_t head_dim, std::uint32_t page_size) const override {
    kvcache::TileLayout f;
    f.code_bits = 32;
    f.slot_code_bytes = F == Flaw::shared_slots ? 0 : head_dim * 4;
    f.code_bytes = std::uint64_t{page_size} * head_dim * 4;
    f.tile_bytes = F == Flaw::zero_tile ? 0 : F == Flaw::huge_tile ? 1ull << 40 : f.code_bytes;
    return f;
  }
  void encode(const DLTensor& src, std::uint32_t first_slot, std::uint32_t page_size,
              void* tile) const override {
    if (F == Flaw::encode_throws)
      throw kvcache::Error(kvcache::Code::internal, "encode is broken on purpose");
    const auto dim = static_cast<std::size_t>(src.shape[1]);
    const std::size_t bytes = static_cast<std::size_t>(src.shape[0]) * dim * 4;
    std::memcpy(static_cast<std::byte*>(tile) + first_slot * dim * 4, src.data, bytes);
    if (F == Flaw::writes_past_tile)
      std::memset(static_cast<std::byte*>(tile) + std::size_t{page_size} * dim * 4, 0, 8);
  }
  void decode(const void* tile, std::uint32_t first_slot, std::uint32_t,
              DLTensor& dst) const override {
    const auto dim = static_cast<std::size_t>(dst.shape[1]);
    const std::size_t n = static_cast<std::size_t>(dst.shape[0]) * dim;
    std::memcpy(dst.data, static_cast<const std::byte*>(tile) + first_slot * dim * 4, n * 4);
    if (F == Flaw::nan_decode) static_cast<float*>(dst.data)[0] = NAN;
  }
};

}  // namespace

using kvcache::sdk::component;
KVCACHE_PLUGIN("test-flawed-formats", "1.0.0",
               component<Flawed<Flaw::encode_throws>>("flawed-encode-throws", "1.0.0"),
               component<Flawed<Flaw::zero_tile>>("flawed-zero-tile", "1.0.0"),
               component<Flawed<Flaw::writes_past_tile>>("flawed-writes-past-tile", "1.0.0"),
               component<Flawed<Flaw::huge_tile>>("flawed-huge-tile", "1.0.0"),
               component<Flawed<Flaw::shared_slots>>("flawed-shared-slots", "1.0.0"),
               component<Flawed<Flaw::nan_decode>>("flawed-nan-decode", "1.0.0"))
