// A CacheStore whose bookkeeping is a PageBook: every operation that only reads or changes the
// book, under a reader/writer lock, plus info and stats. A backend adds where its pages live:
// append, gather, read_tile and the PageMemory hooks (poison, copy_page, move_slots), which the
// book calls with the lock held.
#pragma once

#include <shared_mutex>

#include "kvcache/cache_store.hpp"
#include "kvcache/formats.hpp"
#include "kvcache/paging/page_book.hpp"

namespace kvcache::paging {

class PagedStoreBase : public CacheStore, protected PageMemory {
 public:
  explicit PagedStoreBase(const StoreSpec& spec);

  StoreInfo info() const override;
  StoreStats stats() const override;
  SeqId create_sequence() override;
  void release(SeqId sequence) override;
  SeqId fork(SeqId parent) override;
  void reserve(std::span<const SeqId> sequences, std::span<const std::uint32_t> tokens) override;
  void unreserve(SeqId sequence, std::uint64_t tokens) override;
  void truncate(SeqId sequence, std::uint64_t tokens) override;
  std::uint64_t drop(SeqId sequence, std::span<const PositionRange> ranges) override;
  std::uint64_t drop_unseen(SeqId sequence, std::span<const PositionRange> ranges) override;
  std::uint64_t length(SeqId sequence) const override;
  std::uint64_t written(SeqId sequence, std::uint32_t layer) const override;
  std::vector<Position> positions(SeqId sequence) const override;
  void publish_prefix(SeqId sequence, std::span<const std::int32_t> token_ids) override;
  std::uint64_t match_prefix(SeqId sequence, std::span<const std::int32_t> token_ids) override;
  std::vector<std::uint8_t> prefix_pages(std::span<const std::int32_t> token_ids) const override;
  bool attach_prefix(SeqId sequence, std::span<const std::int32_t> token_ids,
                     std::span<const std::uint64_t> pages) override;
  std::uint64_t evict_cached(std::uint64_t count) override;
  std::uint64_t lookup_prefix(std::span<const std::int32_t> token_ids) const override;
  void export_page(std::uint32_t page, std::span<std::byte> image) const override;
  PageImport import_page(std::span<const std::int32_t> token_ids,
                         std::span<const std::byte> image) override;
  PageTable page_table(std::span<const SeqId> sequences) const override;
  std::vector<float> scores(SeqId sequence) const override;

  // The book, for this backend's attention (with the lock held).
  PageBook& book() { return book_; }
  const PageBook& book() const { return book_; }
  const StoreSpec& spec() const { return book_.spec(); }
  std::uint32_t page_size() const { return book_.page_size(); }
  // The formats of K and V (an external one with its codec), their tile layouts, and the bytes
  // of one page across layers, K and V.
  const StoreFormat& format(bool value) const { return value ? v_format_ : k_format_; }
  const TileLayout& layout(bool value) const { return format(value).layout; }
  std::uint64_t page_bytes() const { return page_bytes_; }

 protected:
  PageBook book_;
  mutable std::shared_mutex mutex_;

 private:
  // Error(invalid_argument) unless an image of `bytes` is one page's.
  void check_image(std::uint64_t bytes) const;

  StoreFormat k_format_, v_format_;
  std::uint64_t page_bytes_ = 0;
};

}  // namespace kvcache::paging
