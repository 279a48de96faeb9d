// Walks the key blocks of an item (at most one page each) for kernels that do not walk the pages
// themselves: rows read in place are passed as they are stored (with their next tile to
// prefetch), the others decoded into the task's float32 rows; values only when asked for.
#pragma once

#include <algorithm>
#include <cstdint>

#include "attention/layer_run.hpp"

namespace kvcache::cpu {

// body(keys, values, first slot, rows, the segment's rotation) for every block of the item's
// segments.
template <class Body>
void for_each_block(const LayerRun& run, const Item& item, const TaskBuffers& buffers,
                    RowFormat keys, RowFormat values, bool with_values, Body&& body) {
  const std::size_t seq = run.slots.query_sequence[item.query];
  const PagedStore::SequencePages& view = run.step.pages[seq];
  const std::uint64_t written = run.slots.written[seq];
  const std::uint32_t page = run.page, dim = run.dim, kv_head = item.kv_head / run.hg.parts;
  // This head's K and V tiles (the store's members are read once, not at every page past the
  // opaque kernel calls).
  const std::byte* const tiles[2] = {run.tiles(item.kv_head, false), run.tiles(item.kv_head, true)};
  const std::size_t tile_bytes[2] = {run.kc.layout().tile_bytes, run.vc.layout().tile_bytes};
  for (std::size_t i = item.first; i < item.end; ++i) {
    const Segment& s = run.schedule.segments[i];
    // Page by page, the index counted rather than divided for (a 64-bit division per page
    // showed in the profile).
    for (std::uint64_t b = s.begin, index = s.begin / page; b < s.end; ++index) {
      const std::uint64_t e = std::min(s.end, (index + 1) * page);
      const PageId p = view.pages[index];
      const auto n = static_cast<std::uint32_t>(e - b);
      // The tiles `ahead_pages` ahead start arriving now (the nearer ones are on their way).
      const std::uint64_t ahead_index = index + run.step.ahead_pages;
      RowBlock blocks[2];
      for (const bool value : {false, true}) {
        if (value && !with_values) continue;
        const SlotCodec& codec = value ? run.vc : run.kc;
        const RowFormat kind = value ? values : keys;
        const std::byte* tile = tiles[value] + std::size_t{p} * tile_bytes[value];
        const std::byte* ahead =
            ahead_index * page < s.end
                ? tiles[value] + std::size_t{view.pages[ahead_index]} * tile_bytes[value]
                : nullptr;
        const auto first = static_cast<std::uint32_t>(b - index * page);
        if (kind != RowFormat::float32) {
          blocks[value] = {kind, tile + slot_code_offset(codec.layout(), first),
                           tile + slot_meta_offset(codec.spec(), codec.layout(), dim, first), ahead,
                           tile_bytes[value]};
          continue;
        }
        float* rows = value ? buffers.v : buffers.k;
        blocks[value] = {RowFormat::float32, rows};
        // Slots of a token group still being filled wait in the residual, not in the page.
        const std::uint64_t complete = codec.spec().groups_tokens()
                                           ? written / codec.spec().group * codec.spec().group
                                           : written;
        const std::uint64_t split = std::clamp(complete, b, e);
        if (split > b)
          codec.decode_rows(tile, first, static_cast<std::uint32_t>(split - b), rows, ahead,
                            tile_bytes[value]);
        for (std::uint64_t slot = split; slot < e; ++slot)
          run.store.decode_row(run.slots.sequences[seq], run.layer, kv_head, value, slot,
                               rows + (slot - b) * dim);
      }
      body(blocks[0], blocks[1], b, n, s.rotation);
      b = e;
    }
  }
}

}  // namespace kvcache::cpu
