// A store's formats resolved once: built-in ones by name, any other through its component's codec,
// whose layout and calls are checked before a store takes any memory for them.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kvcache/formats.hpp"
#include "kvcache/status.hpp"

namespace kvcache {
namespace {

[[noreturn]] void refuse(const std::string& name, const std::string& why) {
  throw Error(Code::invalid_argument, "storage format '" + name + "' refused: " + why);
}

// What a store needs of a layout it did not compute: slots that fit the tile and can be moved
// one by one, and no more than 8 bytes an element (more than float64 is no storage format).
void check_layout(const std::string& name, const TileLayout& f, std::uint32_t head_dim,
                  std::uint32_t page_size) {
  const std::uint64_t codes = std::uint64_t{page_size} * f.slot_code_bytes;
  const std::uint64_t meta = std::uint64_t{page_size} * f.slot_meta_bytes;
  const std::uint64_t largest = std::uint64_t{page_size} * head_dim * 8 + 4096;
  if (f.tile_bytes == 0) refuse(name, "its tile has 0 bytes");
  if (f.slot_code_bytes == 0)
    refuse(name,
           "its slots are not self-contained (slot_code_bytes 0), so a store cannot move "
           "a token; only built-in formats may group tokens");
  if (f.code_bytes < codes)
    refuse(name, std::to_string(page_size) + " slots of " + std::to_string(f.slot_code_bytes) +
                     " code bytes do not fit its code_bytes " + std::to_string(f.code_bytes));
  if (f.tile_bytes < f.code_bytes + meta)
    refuse(name, "codes (" + std::to_string(f.code_bytes) + " bytes) and " +
                     std::to_string(page_size) + " slots of " + std::to_string(f.slot_meta_bytes) +
                     " meta bytes do not fit its tile of " + std::to_string(f.tile_bytes));
  if (f.tile_bytes > largest)
    refuse(name, "a tile of " + std::to_string(f.tile_bytes) + " bytes for " +
                     std::to_string(page_size) + " x " + std::to_string(head_dim) +
                     " elements is more than 8 bytes an element");
}

// Encodes a page of rows and decodes it back, in buffers with guard bytes after them: a codec
// that throws, writes past its tile or its rows, or decodes finite rows to non-finite values is
// refused now rather than in the middle of a step.
void try_codec(const std::string& name, const Quantizer& codec, const TileLayout& f,
               std::uint32_t head_dim, std::uint32_t page_size) {
  constexpr std::size_t kGuard = 64;
  constexpr auto kMark = std::byte{0xA5};
  const std::size_t elements = std::size_t{page_size} * head_dim;
  std::vector<float> rows(elements);
  for (std::size_t i = 0; i < elements; ++i)
    rows[i] = std::sin(0.37f * static_cast<float>(i)) * (1.0f + static_cast<float>(i % 7));
  std::vector<std::byte> tile(f.tile_bytes + kGuard, kMark);
  std::vector<float> back(elements + kGuard, 0.0f);
  const float mark = -1234.5f;
  std::fill(back.begin() + static_cast<std::ptrdiff_t>(elements), back.end(), mark);
  std::int64_t shape[2] = {page_size, head_dim};
  const auto tensor = [&](float* data, std::int64_t count) {
    shape[0] = count;
    return DLTensor{data, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, nullptr, 0};
  };
  try {
    const DLTensor all = tensor(rows.data(), page_size);
    codec.encode(all, 0, page_size, tile.data());
    // A single row at the last slot: the codec must honour first_slot.
    const DLTensor last = tensor(rows.data(), 1);
    codec.encode(last, page_size - 1, page_size, tile.data());
  } catch (const std::exception& e) {
    refuse(name, std::string("its encode failed: ") + e.what());
  }
  if (std::any_of(tile.begin() + static_cast<std::ptrdiff_t>(f.tile_bytes), tile.end(),
                  [&](std::byte b) { return b != kMark; }))
    refuse(name, "its encode wrote past its tile of " + std::to_string(f.tile_bytes) + " bytes");
  try {
    DLTensor out = tensor(back.data(), page_size);
    codec.decode(tile.data(), 0, page_size, out);
  } catch (const std::exception& e) {
    refuse(name, std::string("its decode failed: ") + e.what());
  }
  if (std::any_of(back.begin() + static_cast<std::ptrdiff_t>(elements), back.end(),
                  [&](float v) { return v != mark; }))
    refuse(name, "its decode wrote past " + std::to_string(page_size) + " rows of " +
                     std::to_string(head_dim));
  if (!std::all_of(back.begin(), back.begin() + static_cast<std::ptrdiff_t>(elements),
                   [](float v) { return std::isfinite(v); }))
    refuse(name, "its decode turned finite rows into non-finite values");
}

}  // namespace

StoreFormat store_format(const StoreSpec& spec, bool value, bool try_it) {
  const std::string& name = value ? spec.v_format : spec.k_format;
  const nlohmann::json& options = value ? spec.v_options : spec.k_options;
  const std::shared_ptr<const Quantizer>& codec = value ? spec.v_codec : spec.k_codec;
  const std::uint32_t head_dim = spec.model.head_dim;
  if (is_built_in_format(name) || codec == nullptr) {
    StoreFormat f{name, parse_format(name, options), {}, nullptr};  // unknown: the nearest name
    f.layout = format_layout(f.spec, head_dim, spec.page_size);
    return f;
  }
  StoreFormat f{name, FormatSpec{FormatKind::external}, {}, codec};
  try {
    f.layout = codec->describe(head_dim, spec.page_size);
  } catch (const std::exception& e) {
    refuse(name, std::string("it describes no layout for head_dim ") + std::to_string(head_dim) +
                     " and page size " + std::to_string(spec.page_size) + ": " + e.what());
  }
  check_layout(name, f.layout, head_dim, spec.page_size);
  if (try_it) try_codec(name, *codec, f.layout, head_dim, spec.page_size);
  return f;
}

}  // namespace kvcache
