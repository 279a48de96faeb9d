#include "builtin_quantizer.hpp"

#include <string>

#include "kvcache/status.hpp"

namespace kvcache::reference {
namespace {

struct Rows {
  std::uint32_t count;
  std::uint32_t dim;
  std::byte* data;  // byte_offset applied
};

// Checks a host float32 [count, head_dim] tensor that covers slots [first_slot, +count) of a
// page of page_size slots.
Rows rows_of(const DLTensor& t, std::uint32_t first_slot, std::uint32_t page_size) {
  if (t.device.device_type != kDLCPU || t.ndim != 2 || t.dtype.code != kDLFloat ||
      t.dtype.bits != 32 || t.dtype.lanes != 1 || t.shape[0] < 0 || t.shape[1] <= 0 ||
      t.shape[1] > 65536 ||
      (t.strides != nullptr && (t.strides[1] != 1 || t.strides[0] != t.shape[1])))
    throw Error(Code::invalid_argument,
                "quantizer tensors must be compact host float32 [count, head_dim]");
  if (t.shape[0] > page_size || first_slot > page_size - t.shape[0])
    throw Error(Code::invalid_argument, "slots [" + std::to_string(first_slot) + ", +" +
                                            std::to_string(t.shape[0]) + ") lie beyond a page of " +
                                            std::to_string(page_size));
  return {static_cast<std::uint32_t>(t.shape[0]), static_cast<std::uint32_t>(t.shape[1]),
          static_cast<std::byte*>(t.data) + t.byte_offset};
}

}  // namespace

BuiltinQuantizer::BuiltinQuantizer(FormatKind kind, const sdk::Options& options)
    : spec_(parse_format(FormatSpec{kind}.name(), options.json())) {}

TileLayout BuiltinQuantizer::describe(std::uint32_t head_dim, std::uint32_t page_size) const {
  return format_layout(spec_, head_dim, page_size);
}

void BuiltinQuantizer::encode(const DLTensor& src, std::uint32_t first_slot,
                              std::uint32_t page_size, void* tile) const {
  const auto [count, dim, data] = rows_of(src, first_slot, page_size);
  const TileLayout f = format_layout(spec_, dim, page_size);
  auto* t = static_cast<std::byte*>(tile);
  const auto* rows = reinterpret_cast<const float*>(data);
  if (spec_.groups_tokens()) {
    if (first_slot % spec_.group != 0 || count % spec_.group != 0)
      throw Error(Code::invalid_argument,
                  spec_.name() + " encodes whole groups of " + std::to_string(spec_.group) +
                      " tokens; a store keeps the newest ones in fp16 until their group fills");
    for (std::uint32_t g = 0; g < count; g += spec_.group)
      reference::encode_group(
          spec_,
          std::span<const float>(rows + std::size_t{g} * dim, std::size_t{spec_.group} * dim), dim,
          t + slot_code_offset(f, first_slot + g),
          t + slot_meta_offset(spec_, f, dim, first_slot + g));
    return;
  }
  for (std::uint32_t r = 0; r < count; ++r) {
    const std::uint32_t slot = first_slot + r;
    reference::encode(spec_, std::span<const float>(rows + std::size_t{r} * dim, dim),
                      t + slot_code_offset(f, slot), t + slot_meta_offset(spec_, f, dim, slot));
  }
}

void BuiltinQuantizer::decode(const void* tile, std::uint32_t first_slot, std::uint32_t page_size,
                              DLTensor& dst) const {
  const auto [count, dim, data] = rows_of(dst, first_slot, page_size);
  const TileLayout f = format_layout(spec_, dim, page_size);
  const auto* t = static_cast<const std::byte*>(tile);
  auto* rows = reinterpret_cast<float*>(data);
  for (std::uint32_t r = 0; r < count; ++r) {
    const std::uint32_t slot = first_slot + r;
    reference::decode(spec_, t + slot_code_offset(f, slot),
                      t + slot_meta_offset(spec_, f, dim, slot),
                      std::span<float>(rows + std::size_t{r} * dim, dim));
  }
}

}  // namespace kvcache::reference
