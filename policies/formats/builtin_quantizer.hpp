// The built-in storage formats as Quantizer components, encoding and decoding tiles on the host
// with the reference code: what `quantizer: {k: ...}` names in a config, and the oracle that
// backends' fused kernels are compared with.
#pragma once

#include <cstddef>

#include "kvcache/formats.hpp"
#include "kvcache/quantizer.hpp"
#include "kvcache/sdk/options.hpp"

namespace kvcache::reference {

class BuiltinQuantizer : public Quantizer {
 public:
  BuiltinQuantizer(FormatKind kind, const sdk::Options& options);
  TileLayout describe(std::uint32_t head_dim, std::uint32_t page_size) const override;
  void encode(const DLTensor& src, std::uint32_t first_slot, std::uint32_t page_size,
              void* tile) const override;
  void decode(const void* tile, std::uint32_t first_slot, std::uint32_t page_size,
              DLTensor& dst) const override;

 private:
  FormatSpec spec_;
};

// One class per format, so each is its own component.
template <FormatKind K>
class Builtin final : public BuiltinQuantizer {
 public:
  explicit Builtin(const sdk::Options& options) : BuiltinQuantizer(K, options) {}
};

}  // namespace kvcache::reference
