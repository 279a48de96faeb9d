#include "host_store.hpp"

#include <cstring>
#include <string>

#include "kvcache/numeric.hpp"
#include "tensor_rows.hpp"

namespace scalar {

using kvcache::SeqId;

HostStore::HostStore(const kvcache::StoreSpec& spec)
    : PagedStoreBase(spec),
      k_codec_(format(false), spec.model.head_dim, spec.page_size),
      v_codec_(format(true), spec.model.head_dim, spec.page_size) {
  const std::size_t tiles = std::size_t{book_.total_pages()} * spec.model.kv_heads;
  k_pool_bytes_ = tiles * k_codec_.layout().tile_bytes;
  layer_bytes_ = k_pool_bytes_ + tiles * v_codec_.layout().tile_bytes;
  // Poisoned padding reads as NaN in every float format, so a kernel reading it shows.
  memory_.assign(layer_bytes_ * spec.model.layers,
                 spec.poison_unused ? std::byte{0xFF} : std::byte{0});
}

std::byte* HostStore::tile(PageId page, std::uint32_t layer, std::uint32_t head, bool value) const {
  const std::size_t index = std::size_t{page} * spec().model.kv_heads + head;
  return memory_.data() + layer * layer_bytes_ + (value ? k_pool_bytes_ : 0) +
         index * codec(value).layout().tile_bytes;
}

void HostStore::append(std::uint32_t layer, std::span<const SeqId> ids,
                       std::span<const std::uint32_t> counts, const DLTensor& k,
                       const DLTensor& v) {
  std::unique_lock guard(mutex_);
  const std::vector<Sequence*> sequences = book_.check_append(layer, ids, counts);
  std::uint64_t rows = 0;
  for (const std::uint32_t c : counts) rows += c;
  const std::uint32_t heads = spec().model.kv_heads, dim = spec().model.head_dim;
  const TensorRows k_rows(k, rows, heads, dim, "k"), v_rows(v, rows, heads, dim, "v");
  std::vector<float> row(dim);
  std::uint64_t first_row = 0;  // of the sequence's rows in k and v
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    Sequence& s = *sequences[i];
    for (std::uint32_t t = 0; t < counts[i]; ++t) {
      const std::uint64_t slot = s.written[layer] + t;
      for (std::uint32_t h = 0; h < heads; ++h) {
        for (const bool value : {false, true}) {
          (value ? v_rows : k_rows).read(first_row + t, h, row.data());
          if (codec(value).token_group() != 0) {
            hold_row(s, layer, h, value, slot, row.data());
          } else {
            codec(value).encode(row.data(), tile(s.pages[slot / page_size()], layer, h, value),
                                static_cast<std::uint32_t>(slot % page_size()));
          }
        }
      }
    }
    first_row += counts[i];
  }
  for (std::size_t i = 0; i < sequences.size(); ++i) sequences[i]->written[layer] += counts[i];
}

void HostStore::hold_row(Sequence& s, std::uint32_t layer, std::uint32_t head, bool value,
                         std::uint64_t slot, const float* row) {
  const std::uint32_t dim = spec().model.head_dim, group = codec(value).token_group();
  std::uint16_t* held = book_.residual_row(s, layer, head, value, slot);
  for (std::uint32_t i = 0; i < dim; ++i) held[i] = kvcache::fp16_from_float(row[i]);
  if ((slot + 1) % group != 0) return;
  const std::uint64_t first = slot + 1 - group;
  std::vector<float> rows(std::size_t{group} * dim);
  for (std::uint32_t g = 0; g < group; ++g) {
    const std::uint16_t* r = book_.residual_row(s, layer, head, value, first + g);
    for (std::uint32_t i = 0; i < dim; ++i) rows[g * dim + i] = kvcache::float_from_fp16(r[i]);
  }
  codec(value).encode_group(rows.data(), tile(s.pages[first / page_size()], layer, head, value),
                            static_cast<std::uint32_t>(first % page_size()));
}

void HostStore::read_row(const Sequence& s, std::uint32_t layer, std::uint32_t head, bool value,
                         std::uint64_t slot, float* row) const {
  const std::uint32_t group = codec(value).token_group();
  if (group != 0 && (slot / group + 1) * group > s.written[layer]) {  // still held back
    const std::uint16_t* held = book_.residual_row(s, layer, head, value, slot);
    for (std::uint32_t i = 0; i < spec().model.head_dim; ++i)
      row[i] = kvcache::float_from_fp16(held[i]);
    return;
  }
  codec(value).decode(tile(s.pages[slot / page_size()], layer, head, value),
                      static_cast<std::uint32_t>(slot % page_size()), row);
}

void HostStore::gather(std::uint32_t layer, SeqId id, DLTensor& k, DLTensor& v) const {
  std::unique_lock guard(mutex_);
  const Sequence& s = book_.find(id);
  book_.check_layer(layer);
  const std::uint64_t n = s.written[layer];
  const std::uint32_t heads = spec().model.kv_heads, dim = spec().model.head_dim;
  const TensorRows k_out(k, n, heads, dim, "k"), v_out(v, n, heads, dim, "v");
  std::vector<float> row(dim);
  for (std::uint64_t slot = 0; slot < n; ++slot) {
    for (std::uint32_t h = 0; h < heads; ++h) {
      for (const bool value : {false, true}) {
        read_row(s, layer, h, value, slot, row.data());
        (value ? v_out : k_out).write(slot, h, row.data());
      }
    }
  }
}

std::vector<std::byte> HostStore::read_tile(std::uint32_t page, std::uint32_t layer,
                                            std::uint32_t head, bool value) const {
  book_.check_tile(page, layer, head);
  std::unique_lock guard(mutex_);
  const std::byte* t = tile(page, layer, head, value);
  return {t, t + codec(value).layout().tile_bytes};
}

void HostStore::poison(PageId page, std::uint32_t from_slot) {
  for (std::uint32_t layer = 0; layer < spec().model.layers; ++layer) {
    for (std::uint32_t h = 0; h < spec().model.kv_heads; ++h) {
      for (const bool value : {false, true}) {
        const kvcache::TileLayout& f = codec(value).layout();
        std::byte* t = tile(page, layer, h, value);
        if (from_slot == 0) {  // the whole tile, a group's scales included
          std::memset(t, 0xFF, f.tile_bytes);
          continue;
        }
        const std::size_t slots = page_size() - from_slot;
        std::memset(t + from_slot * f.slot_code_bytes, 0xFF, slots * f.slot_code_bytes);
        std::memset(t + f.code_bytes + from_slot * f.slot_meta_bytes, 0xFF,
                    slots * f.slot_meta_bytes);
      }
    }
  }
}

void HostStore::copy_page(PageId from, PageId to) {
  for (std::uint32_t layer = 0; layer < spec().model.layers; ++layer)
    for (std::uint32_t h = 0; h < spec().model.kv_heads; ++h)
      for (const bool value : {false, true})
        std::memcpy(tile(to, layer, h, value), tile(from, layer, h, value),
                    codec(value).layout().tile_bytes);
}

void HostStore::move_slots(std::span<const kvcache::paging::SlotMove> moves) {
  for (const kvcache::paging::SlotMove& m : moves)
    for (std::uint32_t layer = 0; layer < spec().model.layers; ++layer)
      for (std::uint32_t h = 0; h < spec().model.kv_heads; ++h)
        for (const bool value : {false, true})
          codec(value).copy_slot(tile(m.from_page, layer, h, value), m.from_slot,
                                 tile(m.to_page, layer, h, value), m.to_slot);
}

}  // namespace scalar
