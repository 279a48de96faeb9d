#include "kvcache/paging/paged_store_base.hpp"

#include <mutex>

#include "kvcache/formats.hpp"

namespace kvcache::paging {

PagedStoreBase::PagedStoreBase(const StoreSpec& spec)
    : book_(spec, *this),
      k_format_(store_format(spec, false, true)),
      v_format_(store_format(spec, true, true)),
      page_bytes_(std::uint64_t{spec.model.layers} * spec.model.kv_heads *
                  (k_format_.layout.tile_bytes + v_format_.layout.tile_bytes)) {}

StoreInfo PagedStoreBase::info() const {
  return {book_.page_size(), book_.total_pages(), page_bytes_, k_format_.layout, v_format_.layout};
}

StoreStats PagedStoreBase::stats() const {
  std::shared_lock lock(mutex_);
  return book_.stats(page_bytes_);
}

SeqId PagedStoreBase::create_sequence() {
  std::unique_lock lock(mutex_);
  return book_.create();
}

void PagedStoreBase::release(SeqId id) {
  std::unique_lock lock(mutex_);
  book_.release(id);
}

SeqId PagedStoreBase::fork(SeqId parent) {
  std::unique_lock lock(mutex_);
  return book_.fork(parent);
}

void PagedStoreBase::reserve(std::span<const SeqId> ids, std::span<const std::uint32_t> tokens) {
  std::unique_lock lock(mutex_);
  book_.reserve(ids, tokens);
}

void PagedStoreBase::unreserve(SeqId id, std::uint64_t tokens) {
  std::unique_lock lock(mutex_);
  const std::uint64_t held = book_.find(id).length;
  if (tokens > held)
    throw Error(Code::invalid_argument, "cannot give back " + std::to_string(tokens) +
                                            " slots of sequence " + std::to_string(id) +
                                            ", which holds " + std::to_string(held));
  book_.truncate(id, held - tokens);
}

void PagedStoreBase::truncate(SeqId id, std::uint64_t tokens) {
  std::unique_lock lock(mutex_);
  book_.truncate(id, tokens);
}

std::uint64_t PagedStoreBase::drop(SeqId id, std::span<const PositionRange> ranges) {
  std::unique_lock lock(mutex_);
  return book_.drop(id, ranges);
}

std::uint64_t PagedStoreBase::drop_unseen(SeqId id, std::span<const PositionRange> ranges) {
  std::unique_lock lock(mutex_);
  return book_.drop(id, ranges, true);
}

std::uint64_t PagedStoreBase::length(SeqId id) const {
  std::shared_lock lock(mutex_);
  return book_.find(id).length;
}

std::uint64_t PagedStoreBase::written(SeqId id, std::uint32_t layer) const {
  std::shared_lock lock(mutex_);
  book_.check_layer(layer);
  return book_.find(id).written[layer];
}

std::vector<Position> PagedStoreBase::positions(SeqId id) const {
  std::shared_lock lock(mutex_);
  return book_.positions(id);
}

void PagedStoreBase::publish_prefix(SeqId id, std::span<const std::int32_t> token_ids) {
  std::unique_lock lock(mutex_);
  book_.publish_prefix(id, token_ids);
}

std::uint64_t PagedStoreBase::match_prefix(SeqId id, std::span<const std::int32_t> token_ids) {
  std::unique_lock lock(mutex_);
  return book_.match_prefix(id, token_ids);
}

std::vector<std::uint8_t> PagedStoreBase::prefix_pages(
    std::span<const std::int32_t> token_ids) const {
  std::shared_lock lock(mutex_);
  return book_.prefix_pages(token_ids);
}

bool PagedStoreBase::attach_prefix(SeqId id, std::span<const std::int32_t> token_ids,
                                   std::span<const std::uint64_t> pages) {
  std::unique_lock lock(mutex_);
  return book_.attach_prefix(id, token_ids, pages);
}

std::uint64_t PagedStoreBase::evict_cached(std::uint64_t count) {
  std::unique_lock lock(mutex_);
  return book_.evict_cached(count);
}

std::uint64_t PagedStoreBase::lookup_prefix(std::span<const std::int32_t> token_ids) const {
  std::shared_lock lock(mutex_);
  return book_.lookup_prefix(token_ids);
}

void PagedStoreBase::check_image(std::uint64_t bytes) const {
  if (bytes != page_bytes_)
    throw Error(Code::invalid_argument, "a page image is " + std::to_string(page_bytes_) +
                                            " bytes here; got " + std::to_string(bytes));
}

void PagedStoreBase::export_page(std::uint32_t page, std::span<std::byte> image) const {
  check_image(image.size());
  book_.check_tile(page, 0, 0);
  std::shared_lock lock(mutex_);
  read_page(page, image);
}

PageImport PagedStoreBase::import_page(std::span<const std::int32_t> token_ids,
                                       std::span<const std::byte> image) {
  check_image(image.size());
  std::unique_lock lock(mutex_);
  return book_.import_page(token_ids, image);
}

PageTable PagedStoreBase::page_table(std::span<const SeqId> ids) const {
  std::shared_lock lock(mutex_);
  return book_.page_table(ids);
}

std::vector<float> PagedStoreBase::scores(SeqId id) const {
  std::shared_lock lock(mutex_);
  return book_.find(id).scores;
}

}  // namespace kvcache::paging
