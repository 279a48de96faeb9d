// Page bookkeeping in O(1): a free stack, reference counts, and an LRU list of cached pages
// (unreferenced pages that the prefix cache keeps until memory is needed).
#pragma once

#include <cstdint>
#include <vector>

namespace kvcache::paging {

using PageId = std::uint32_t;

class PagePool {
 public:
  explicit PagePool(std::uint32_t total);

  std::uint32_t total() const { return static_cast<std::uint32_t>(refs_.size()); }
  std::uint32_t free_count() const { return static_cast<std::uint32_t>(free_.size()); }
  std::uint32_t cached_count() const { return cached_; }
  std::uint32_t used_count() const { return total() - free_count() - cached_count(); }

  // A free page with one reference. Precondition: free_count() > 0.
  PageId allocate();
  // One more reference; a cached page leaves the LRU list.
  void retain(PageId page);
  // One reference less; at zero the page becomes cached (most recently used) or free.
  void release(PageId page, bool keep_cached);
  std::uint32_t refs(PageId page) const { return refs_[page]; }
  bool cached(PageId page) const { return in_lru_[page] != 0; }

  // The least recently cached page, made free. Precondition: cached_count() > 0.
  PageId evict_oldest_cached();

 private:
  static constexpr PageId kNone = 0xFFFFFFFFu;
  void lru_remove(PageId page);

  std::vector<std::uint32_t> refs_;
  std::vector<PageId> free_;  // stack
  // Intrusive doubly linked LRU list of cached pages: head is the oldest.
  std::vector<PageId> prev_;
  std::vector<PageId> next_;
  std::vector<std::uint8_t> in_lru_;
  PageId head_ = kNone;
  PageId tail_ = kNone;
  std::uint32_t cached_ = 0;
};

}  // namespace kvcache::paging
