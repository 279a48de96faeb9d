// The cpu-tbb CacheStore: the core's PagedStoreBase (a PageBook) for bookkeeping, with per-layer
// K and V pools carved from one host allocation made at creation.
//
// Memory: for each layer, a K pool then a V pool, each [kv_head][page] tiles of the format's
// tile_bytes. Structural changes (reserve, fork, drop, release, prefix) take the lock
// exclusively; append takes it shared, so appends to different sequences run concurrently.
// Within one append, work is split over sequences x heads.
#pragma once

#include <cstddef>
#include <memory>
#include <shared_mutex>
#include <vector>

#include "kvcache/cache_store.hpp"
#include "kvcache/paging/paged_store_base.hpp"
#include "store/append_claims.hpp"
#include "store/input_rows.hpp"
#include "store/slot_codec.hpp"

namespace kvcache::cpu {

using paging::PageId;

class PagedStore final : public paging::PagedStoreBase {
 public:
  explicit PagedStore(const StoreSpec& spec);
  ~PagedStore() override;

  void append(std::uint32_t layer, std::span<const SeqId> sequences,
              std::span<const std::uint32_t> counts, const DLTensor& k, const DLTensor& v) override;
  void gather(std::uint32_t layer, SeqId sequence, DLTensor& k, DLTensor& v) const override;
  std::vector<std::byte> read_tile(std::uint32_t page, std::uint32_t layer, std::uint32_t kv_head,
                                   bool value) const override;

  // A sequence's pages and per-slot scores as attention kernels read them: valid while
  // `lock_shared()` is held and the sequence keeps its shape (a step's plan keeps them).
  struct SequencePages {
    const PageId* pages = nullptr;
    float* scores = nullptr;  // add with atomic_ref
  };
  std::shared_lock<std::shared_mutex> lock_shared() const { return std::shared_lock(mutex_); }
  SequencePages sequence_pages(SeqId sequence);
  const SlotCodec& codec(bool value) const { return value ? v_codec_ : k_codec_; }
  // The tile of page p of a (layer, head) is at head_tiles(...) + p x the tile's bytes: a walk
  // over a sequence's pages computes its base once.
  const std::byte* head_tiles(std::uint32_t layer, std::uint32_t head, bool value) const {
    return tile(0, layer, head, value);
  }
  const Position* positions_of(PageId page) const { return book_.positions_of(page); }
  // One K or V row of a written slot as float32 (from the residual group where it waits).
  void decode_row(SeqId sequence, std::uint32_t layer, std::uint32_t head, bool value,
                  std::uint64_t slot, float* row) const {
    read_row(find(sequence), layer, head, value, slot, row);
  }

 private:
  using Sequence = paging::PageBook::Sequence;

  Sequence& find(SeqId id) { return book_.find(id); }
  const Sequence& find(SeqId id) const { return book_.find(id); }
  // Pools are [layer][K, V][kv head][page] tiles: the pages of one head follow each other, so
  // attention (a thread walks one head of a sequence) reads a run of pages the allocator handed
  // out together as one stream (faster than [page][kv head], docs/perf-log.md).
  std::byte* tile(PageId page, std::uint32_t layer, std::uint32_t head, bool value) const {
    return memory_.get() + layer * layer_stride_ + (value ? k_pool_bytes_ : 0) +
           (std::size_t{head} * book_.total_pages() + page) * codec(value).layout().tile_bytes;
  }
  // PageMemory: what the book asks of the pools.
  void poison(PageId page, std::uint32_t from_slot) override;
  void copy_page(PageId from, PageId to) override;
  void move_slots(std::span<const paging::SlotMove> moves) override;
  void read_page(PageId page, std::span<std::byte> image) const override;
  void write_page(PageId page, std::span<const std::byte> image) override;
  // Calls copy(tile, bytes) for every tile of `page` in the order of its image.
  template <typename Copy>
  void for_each_tile(PageId page, Copy copy) const {
    for (std::uint32_t layer = 0; layer < spec().model.layers; ++layer)
      for (const bool value : {false, true})
        for (std::uint32_t h = 0; h < spec().model.kv_heads; ++h)
          copy(tile(page, layer, h, value), codec(value).layout().tile_bytes);
  }
  // Encodes the complete token groups that overlap slots [begin, end) of an append covering
  // [append_begin, append_end): rows before append_begin come from the residual, the others
  // from `rows`. `group_rows` holds group * head_dim floats.
  void encode_groups(const Sequence& s, std::uint32_t layer, std::uint32_t head, bool value,
                     std::uint64_t begin, std::uint64_t end, std::uint64_t append_begin,
                     std::uint64_t append_end, const InputRows& rows, std::uint64_t first_row,
                     float* group_rows) const;
  void read_row(const Sequence& s, std::uint32_t layer, std::uint32_t head, bool value,
                std::uint64_t slot, float* row) const;
  // A grouping format's rows of an append of `count` tokens to `layer`, from `first_row` of
  // `rows`, that the residual keeps in fp16: the group being filled and the one before it (for
  // truncate).
  void hold_rows(Sequence& s, std::uint32_t layer, bool value, std::uint32_t count,
                 const InputRows& rows, std::uint64_t first_row);

  std::uint32_t page_size_;
  SlotCodec k_codec_;
  SlotCodec v_codec_;
  std::size_t layer_stride_ = 0;  // bytes of one layer's K and V pools
  std::size_t k_pool_bytes_ = 0;
  std::unique_ptr<std::byte, void (*)(void*)> memory_;
  AppendClaims appending_;
};

}  // namespace kvcache::cpu
