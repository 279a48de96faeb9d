#include "builtin_quantizer.hpp"

#include <string>

#include "kvcache/status.hpp"

namespace kvcache::reference {
namespace {

// Checks a host float32 [count, head_dim] tensor and returns its rows and head_dim.
std::pair<std::uint32_t, std::uint32_t> rows_of(const DLTensor& t) {
  if (t.device.device_type != kDLCPU || t.ndim != 2 || t.dtype.code != kDLFloat ||
      t.dtype.bits != 32 || t.dtype.lanes != 1 ||
      (t.strides != nullptr && (t.strides[1] != 1 || t.strides[0] != t.shape[1])))
    throw Error(Code::invalid_argument,
                "quantizer tensors must be compact host float32 [count, head_dim]");
  return {static_cast<std::uint32_t>(t.shape[0]), static_cast<std::uint32_t>(t.shape[1])};
}

}  // namespace

BuiltinQuantizer::BuiltinQuantizer(FormatKind kind, const sdk::Options& options)
    : spec_(parse_format(FormatSpec{kind}.name(), options.json())) {}

StorageFormat BuiltinQuantizer::describe(std::uint32_t head_dim, std::uint32_t page_size) const {
  return format_layout(spec_, head_dim, page_size);
}

void BuiltinQuantizer::encode(const DLTensor& src, std::uint32_t first_slot,
                              std::uint32_t page_size, void* tile) const {
  const auto [count, dim] = rows_of(src);
  const StorageFormat f = format_layout(spec_, dim, page_size);
  if (first_slot + count > page_size) throw Error(Code::invalid_argument, "slots beyond the page");
  auto* t = static_cast<std::byte*>(tile);
  const auto* rows = static_cast<const float*>(src.data);
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
  const auto [count, dim] = rows_of(dst);
  const StorageFormat f = format_layout(spec_, dim, page_size);
  if (first_slot + count > page_size) throw Error(Code::invalid_argument, "slots beyond the page");
  const auto* t = static_cast<const std::byte*>(tile);
  auto* rows = static_cast<float*>(dst.data);
  for (std::uint32_t r = 0; r < count; ++r) {
    const std::uint32_t slot = first_slot + r;
    reference::decode(spec_, t + slot_code_offset(f, slot),
                      t + slot_meta_offset(spec_, f, dim, slot),
                      std::span<float>(rows + std::size_t{r} * dim, dim));
  }
}

}  // namespace kvcache::reference
