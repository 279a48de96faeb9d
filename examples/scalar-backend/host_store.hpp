// The store: the paging library's PagedStoreBase keeps the books (sequences, pages, prefix
// sharing, copy-on-write, compaction, all-or-nothing reserves); this class adds where the pages
// live, one host allocation of [layer][K, V][page][kv head] tiles, and how rows get in and out.
// One lock for everything, taken exclusively: simple, and appends are serialized.
#pragma once

#include <cstddef>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "kvcache/paging/paged_store_base.hpp"
#include "tile_codec.hpp"

namespace scalar {

using kvcache::paging::PageId;

class HostStore final : public kvcache::paging::PagedStoreBase {
 public:
  using Sequence = kvcache::paging::PageBook::Sequence;

  explicit HostStore(const kvcache::StoreSpec& spec);

  void append(std::uint32_t layer, std::span<const kvcache::SeqId> sequences,
              std::span<const std::uint32_t> counts, const DLTensor& k, const DLTensor& v) override;
  void gather(std::uint32_t layer, kvcache::SeqId sequence, DLTensor& k,
              DLTensor& v) const override;
  std::vector<std::byte> read_tile(std::uint32_t page, std::uint32_t layer, std::uint32_t kv_head,
                                   bool value) const override;

  // For attention, with lock() held: one K or V row of a written slot as float32, and the
  // sequence's per-slot scores.
  std::unique_lock<std::shared_mutex> lock() const { return std::unique_lock(mutex_); }
  void read_row(const Sequence& s, std::uint32_t layer, std::uint32_t head, bool value,
                std::uint64_t slot, float* row) const;

 private:
  const TileCodec& codec(bool value) const { return value ? v_codec_ : k_codec_; }
  std::byte* tile(PageId page, std::uint32_t layer, std::uint32_t head, bool value) const;
  // PageMemory: what the book asks of the memory when it rearranges pages.
  void poison(PageId page, std::uint32_t from_slot) override;
  void copy_page(PageId from, PageId to) override;
  void move_slots(std::span<const kvcache::paging::SlotMove> moves) override;
  // A format that groups tokens holds each row back in fp16 until its group is complete, then
  // encodes the group from those rows.
  void hold_row(Sequence& s, std::uint32_t layer, std::uint32_t head, bool value,
                std::uint64_t slot, const float* row);

  TileCodec k_codec_, v_codec_;
  std::size_t k_pool_bytes_ = 0, layer_bytes_ = 0;
  mutable std::vector<std::byte> memory_;
};

}  // namespace scalar
