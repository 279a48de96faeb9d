// An out-of-tree storage format that kvcache knows only through its Quantizer component: 4-bit
// NormalFloat codes (QLoRA's NF4 table) with one fp32 absmax scale per group of elements (32 by
// default, option `group`). A
// store runs it through this encode and tile decode; nothing in kvcache knows its layout.
//
// Tile (one page, one layer, one KV head; P slots, D = head_dim, G = group):
//   [P][D / 2] codes (element 2i in the low nibble of byte i), then [P][D / G] fp32 scales.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>

#include <kvcache/sdk/plugin.hpp>

namespace {

// The 16 quantiles of a standard normal, scaled to [-1, 1] (Dettmers et al., 2023).
constexpr std::array<float, 16> kNf4 = {-1.0f,        -0.69619280f, -0.52507305f, -0.39491749f,
                                        -0.28444138f, -0.18477343f, -0.09105004f, 0.0f,
                                        0.07958030f,  0.16093020f,  0.24611230f,  0.33791524f,
                                        0.44070983f,  0.56261700f,  0.72295684f,  1.0f};

std::uint8_t nearest_code(float x) {
  std::uint8_t best = 0;
  for (std::uint8_t c = 1; c < kNf4.size(); ++c)
    if (std::fabs(kNf4[c] - x) < std::fabs(kNf4[best] - x)) best = c;
  return best;
}

class Nf4 final : public kvcache::Quantizer {
 public:
  explicit Nf4(const kvcache::sdk::Options& options) {
    options.only({"group"});
    group_ = options.get<std::uint32_t>("group", 32);
    if (group_ == 0 || group_ % 2 != 0)
      throw kvcache::Error(kvcache::Code::invalid_argument,
                           "nf4: option 'group' must be a positive even number of elements");
  }

  kvcache::TileLayout describe(std::uint32_t head_dim, std::uint32_t page_size) const override {
    if (head_dim % group_ != 0)
      throw kvcache::Error(kvcache::Code::invalid_argument, "nf4: group " + std::to_string(group_) +
                                                                " does not divide head_dim " +
                                                                std::to_string(head_dim));
    kvcache::TileLayout f;
    f.code_bits = 4;
    f.granularity = kvcache::Granularity::group;
    f.group_size = group_;
    f.symmetric = true;
    f.scale_dtype = {kDLFloat, 32, 1};
    f.slot_code_bytes = head_dim / 2;
    f.slot_meta_bytes = head_dim / group_ * 4;
    f.code_bytes = std::uint64_t{page_size} * f.slot_code_bytes;
    const std::uint64_t used = f.code_bytes + std::uint64_t{page_size} * f.slot_meta_bytes;
    f.tile_bytes = (used + 63) / 64 * 64;
    return f;
  }

  void encode(const DLTensor& src, std::uint32_t first_slot, std::uint32_t page_size,
              void* tile) const override {
    const auto [count, dim] = rows(src, first_slot, page_size);
    const kvcache::TileLayout f = describe(dim, page_size);
    auto* bytes = static_cast<std::uint8_t*>(tile);
    const auto* x =
        reinterpret_cast<const float*>(static_cast<const std::byte*>(src.data) + src.byte_offset);
    for (std::uint32_t r = 0; r < count; ++r) {
      const std::uint32_t slot = first_slot + r;
      std::uint8_t* codes = bytes + std::size_t{slot} * f.slot_code_bytes;
      auto* scales = bytes + f.code_bytes + std::size_t{slot} * f.slot_meta_bytes;
      const float* row = x + std::size_t{r} * dim;
      std::memset(codes, 0, f.slot_code_bytes);
      for (std::uint32_t g = 0; g < dim; g += group_) {
        float absmax = 0.0f;
        for (std::uint32_t i = g; i < g + group_; ++i) absmax = std::max(absmax, std::fabs(row[i]));
        const float scale = absmax > 0.0f ? absmax : 1.0f;
        std::memcpy(scales + g / group_ * 4, &scale, 4);
        for (std::uint32_t i = g; i < g + group_; ++i)
          codes[i / 2] |= static_cast<std::uint8_t>(nearest_code(row[i] / scale) << (4 * (i % 2)));
      }
    }
  }

  void decode(const void* tile, std::uint32_t first_slot, std::uint32_t page_size,
              DLTensor& dst) const override {
    const auto [count, dim] = rows(dst, first_slot, page_size);
    const kvcache::TileLayout f = describe(dim, page_size);
    const auto* bytes = static_cast<const std::uint8_t*>(tile);
    auto* out = reinterpret_cast<float*>(static_cast<std::byte*>(dst.data) + dst.byte_offset);
    for (std::uint32_t r = 0; r < count; ++r) {
      const std::uint32_t slot = first_slot + r;
      const std::uint8_t* codes = bytes + std::size_t{slot} * f.slot_code_bytes;
      const std::uint8_t* scales = bytes + f.code_bytes + std::size_t{slot} * f.slot_meta_bytes;
      float* row = out + std::size_t{r} * dim;
      for (std::uint32_t g = 0; g < dim; g += group_) {
        float scale;
        std::memcpy(&scale, scales + g / group_ * 4, 4);
        for (std::uint32_t i = g; i < g + group_; i += 2) {
          row[i] = kNf4[codes[i / 2] & 0xF] * scale;
          row[i + 1] = kNf4[codes[i / 2] >> 4] * scale;
        }
      }
    }
  }

 private:
  struct Shape {
    std::uint32_t count, dim;
  };
  // A compact host float32 [count, head_dim] tensor within a page of page_size slots.
  static Shape rows(const DLTensor& t, std::uint32_t first_slot, std::uint32_t page_size) {
    const bool compact = t.strides == nullptr || (t.strides[1] == 1 && t.strides[0] == t.shape[1]);
    if (t.device.device_type != kDLCPU || t.ndim != 2 || t.dtype.code != kDLFloat ||
        t.dtype.bits != 32 || t.dtype.lanes != 1 || !compact || t.shape[0] < 0 || t.shape[1] <= 0 ||
        t.shape[0] > page_size || first_slot > page_size - t.shape[0])
      throw kvcache::Error(
          kvcache::Code::invalid_argument,
          "nf4: rows must be compact host float32 [count, head_dim] within a page");
    return {static_cast<std::uint32_t>(t.shape[0]), static_cast<std::uint32_t>(t.shape[1])};
  }

  std::uint32_t group_ = 32;
};

}  // namespace

KVCACHE_PLUGIN("nf4-format", "1.0.0", kvcache::sdk::component<Nf4>("nf4", "1.0.0"))
