#include <algorithm>
#include <string>

#include "kvcache/formats.hpp"
#include "kvcache/nearest_name.hpp"
#include "kvcache/sdk/options.hpp"
#include "kvcache/status.hpp"

namespace kvcache {
namespace {

struct Named {
  const char* name;
  FormatKind kind;
};
constexpr Named kFormats[] = {
    {"fp32", FormatKind::fp32},
    {"fp16", FormatKind::fp16},
    {"bf16", FormatKind::bf16},
    {"fp8-e4m3", FormatKind::fp8_e4m3},
    {"int8-per-token", FormatKind::int8_per_token},
    {"int4-group", FormatKind::int4_group},
    {"kivi-k", FormatKind::kivi_k},
};

}  // namespace

const std::vector<std::string>& format_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const Named& f : kFormats) n.emplace_back(f.name);
    return n;
  }();
  return names;
}

bool is_built_in_format(std::string_view name) {
  const std::vector<std::string>& names = format_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::string FormatSpec::name() const {
  for (const Named& f : kFormats)
    if (f.kind == kind) return f.name;
  return "unknown";
}

FormatSpec parse_format(std::string_view name, const nlohmann::json& options) {
  const sdk::Options opts(options);
  for (const Named& f : kFormats) {
    if (name != f.name) continue;
    FormatSpec spec{f.kind, 32, 4};
    if (f.kind == FormatKind::kivi_k) {
      opts.only({"group", "bits"});
      spec.group = opts.get<std::uint32_t>("group", 32);
      spec.bits = opts.get<std::uint32_t>("bits", 4);
      if (spec.group == 0 || (spec.group & (spec.group - 1)) != 0 || spec.group > 1024)
        throw Error(Code::invalid_argument,
                    "kivi-k: option 'group' must be a power of two up to 1024 tokens, got " +
                        std::to_string(spec.group));
      if (spec.bits != 4 && spec.bits != 2)
        throw Error(Code::invalid_argument,
                    "kivi-k: option 'bits' must be 4 or 2, got " + std::to_string(spec.bits));
    } else if (f.kind == FormatKind::int4_group) {
      opts.only({"group"});
      spec.group = opts.get<std::uint32_t>("group", 32);
      if (spec.group != 32 && spec.group != 64 && spec.group != 128)
        throw Error(
            Code::invalid_argument,
            "int4-group: option 'group' must be 32, 64 or 128, got " + std::to_string(spec.group));
    } else {
      opts.only({});
    }
    return spec;
  }
  throw Error(Code::not_found, "unknown storage format '" + std::string(name) + "'" +
                                   did_you_mean(name, format_names()));
}

TileLayout format_layout(const FormatSpec& spec, std::uint32_t head_dim, std::uint32_t page_size) {
  if (head_dim == 0 || page_size == 0)
    throw Error(Code::invalid_argument, "head_dim and page_size must be positive");
  TileLayout f;
  [[maybe_unused]] const DLDataType f32{kDLFloat, 32, 1};
  const DLDataType f16{kDLFloat, 16, 1};
  switch (spec.kind) {
    case FormatKind::fp32:
      f.code_bits = 32;
      break;
    case FormatKind::fp16:
      f.code_bits = 16;
      break;
    case FormatKind::bf16:
      f.code_bits = 16;
      break;
    case FormatKind::fp8_e4m3:
    case FormatKind::int8_per_token:
      f.code_bits = 8;
      f.granularity = Granularity::token_head;
      f.scale_dtype = f32;
      f.slot_meta_bytes = 4;
      break;
    case FormatKind::kivi_k:
      break;  // below, once the page size is checked
    case FormatKind::external:
      throw Error(Code::invalid_argument,
                  "an external format's layout is what its component describes");
    case FormatKind::int4_group:
      if (head_dim % spec.group != 0)
        throw Error(Code::invalid_argument, "int4-group: group " + std::to_string(spec.group) +
                                                " does not divide head_dim " +
                                                std::to_string(head_dim));
      f.code_bits = 4;
      f.granularity = Granularity::group;
      f.group_size = spec.group;
      f.symmetric = false;
      f.scale_dtype = f16;
      f.slot_meta_bytes = head_dim / spec.group * 4;  // fp16 scale + fp16 minimum per group
      break;
  }
  std::uint64_t meta_bytes = std::uint64_t{page_size} * f.slot_meta_bytes;
  if (spec.kind == FormatKind::kivi_k) {
    if (page_size % spec.group != 0)
      throw Error(Code::invalid_argument, "kivi-k: its group of " + std::to_string(spec.group) +
                                              " tokens must divide the page size " +
                                              std::to_string(page_size) +
                                              " (set quantizer option 'group' or cache.page_size)");
    f.code_bits = spec.bits;
    f.granularity = Granularity::channel;
    f.group_size = spec.group;
    f.symmetric = false;
    f.scale_dtype = f16;
    meta_bytes = std::uint64_t{page_size} / spec.group * head_dim * 4;  // fp16 scale + minimum
  }
  if (head_dim * f.code_bits % 8 != 0)
    throw Error(Code::invalid_argument, "head_dim " + std::to_string(head_dim) +
                                            " does not fill whole bytes in " + spec.name());
  f.slot_code_bytes = head_dim * f.code_bits / 8;
  f.code_bytes = std::uint64_t{page_size} * f.slot_code_bytes;
  const std::uint64_t used = f.code_bytes + meta_bytes;
  f.tile_bytes = (used + 63) / 64 * 64;  // every tile starts on a cache line
  return f;
}

std::uint64_t page_cost(const StoreSpec& spec) {
  const TileLayout k = store_format(spec, false).layout;
  const TileLayout v = store_format(spec, true).layout;
  return std::uint64_t{spec.model.layers} * spec.model.kv_heads * (k.tile_bytes + v.tile_bytes) +
         std::uint64_t{spec.page_size} * sizeof(Position);
}

}  // namespace kvcache
