// The built-in storage formats of K and V: their names, options and tile layout, and the
// reference (plain-loop) encode and decode of one token-head vector. Backends implement fast
// kernels for these layouts and are tested against the reference, byte for byte where the
// format is deterministic.
//
// Tile layout (one page, one layer, one KV head; P = page_size slots, D = head_dim):
//   [P][slot_code_bytes] codes, then [P][slot_meta_bytes] per-slot scales/zeros, padded to 64 B.
// Every slot is self-contained, so compaction moves a token by copying its codes and its meta,
// except for kivi-k, whose scales are per channel over a group of G tokens: its meta is
// [P / G][head_dim] (fp16 scale, fp16 minimum) and a group is encoded once all G tokens exist.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvcache/cache_store.hpp"
#include "kvcache/quantizer.hpp"

namespace kvcache {

enum class FormatKind : std::uint32_t {
  fp32,
  fp16,
  bf16,
  fp8_e4m3,        // fp8 codes, one fp32 scale per token-head: scale = max|x| / 448
  int8_per_token,  // the seed's: scale = max|x| / 127 (>= 1e-8), code = rne(x / scale)
  int4_group,      // asymmetric, per group of head_dim: fp16 scale and fp16 minimum
  kivi_k,          // KIVI keys: int4 or int2 per channel over groups of G tokens, asymmetric
  external,        // any other format: its component's own encode and tile decode (StoreFormat)
};

struct FormatSpec {
  FormatKind kind = FormatKind::fp16;
  std::uint32_t group = 32;  // int4-group: 32, 64 or 128 elements; kivi-k: tokens (power of 2)
  std::uint32_t bits = 4;    // kivi-k: 4 or 2
  // Whether scales span several tokens (kivi-k): such a format is written a whole group at a
  // time, and its slots cannot be moved one by one.
  bool groups_tokens() const { return kind == FormatKind::kivi_k; }
  std::string name() const;
  friend bool operator==(const FormatSpec&, const FormatSpec&) = default;
};

// "fp16", "int4-group", ...; options as in the config ({group: 64}). Throws Error with the
// nearest name or option.
FormatSpec parse_format(std::string_view name, const nlohmann::json& options = {});
const std::vector<std::string>& format_names();
// Whether `name` is one of format_names(): a format stores run by their own code.
bool is_built_in_format(std::string_view name);

// Layout for a head dimension and page size; throws Error(invalid_argument) when the format
// cannot hold it (e.g. a group that does not divide head_dim).
TileLayout format_layout(const FormatSpec& spec, std::uint32_t head_dim, std::uint32_t page_size);

// Byte offsets within a tile of a slot's codes and of its meta (its group's meta for a format
// that groups tokens).
inline std::size_t slot_code_offset(const TileLayout& f, std::uint32_t slot) {
  return std::size_t{slot} * f.slot_code_bytes;
}
inline std::size_t slot_meta_offset(const FormatSpec& spec, const TileLayout& f,
                                    std::uint32_t head_dim, std::uint32_t slot) {
  return f.code_bytes + (spec.groups_tokens() ? std::size_t{slot / spec.group} * head_dim * 4
                                              : std::size_t{slot} * f.slot_meta_bytes);
}

// A store's K or V format as the store runs it: a built-in format, or any other (kind
// external), which runs through its component's codec and lays its tiles out as that component
// describes. An external format must keep each slot self-contained (slot_code_bytes > 0), so
// that compaction can move a token by copying its bytes.
struct StoreFormat {
  std::string name;
  FormatSpec spec;
  TileLayout layout;
  std::shared_ptr<const Quantizer> codec;  // external formats only
  bool external() const { return spec.kind == FormatKind::external; }
};

// The K (value false) or V format of a store spec. A name that is not built in needs the spec's
// codec; its layout is checked, and with `try_codec` its encode and decode are tried once on a
// page of rows. Throws Error naming the format and the reason (unknown name: the nearest one).
StoreFormat store_format(const StoreSpec& spec, bool value, bool try_codec = false);

// Bytes one page of a store takes: every layer's K and V tiles plus the logical position of
// each slot. A store holds capacity_bytes / page_cost(spec) pages.
std::uint64_t page_cost(const StoreSpec& spec);

namespace reference {

// Encodes one token-head vector x[head_dim] into its slot's codes and meta.
void encode(const FormatSpec& spec, std::span<const float> x, std::byte* codes, std::byte* meta);
// For formats that group tokens: encodes rows[group][head_dim] into the group's consecutive
// slot codes and its meta.
void encode_group(const FormatSpec& spec, std::span<const float> rows, std::uint32_t head_dim,
                  std::byte* codes, std::byte* meta);
// Decodes one slot back into out[head_dim] (float32); `meta` is the slot's meta, or its group's
// for a format that groups tokens.
void decode(const FormatSpec& spec, const std::byte* codes, const std::byte* meta,
            std::span<float> out);

}  // namespace reference
}  // namespace kvcache
