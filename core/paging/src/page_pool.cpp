#include "kvcache/paging/page_pool.hpp"

namespace kvcache::paging {

PagePool::PagePool(std::uint32_t total)
    : refs_(total, 0), prev_(total, kNone), next_(total, kNone), in_lru_(total, 0) {
  free_.reserve(total);
  for (PageId p = total; p > 0; --p) free_.push_back(p - 1);  // page 0 is handed out first
}

PageId PagePool::allocate() {
  const PageId page = free_.back();
  free_.pop_back();
  refs_[page] = 1;
  return page;
}

void PagePool::retain(PageId page) {
  if (in_lru_[page]) lru_remove(page);
  ++refs_[page];
}

void PagePool::release(PageId page, bool keep_cached) {
  if (--refs_[page] > 0) return;
  if (!keep_cached) {
    free_.push_back(page);
    return;
  }
  in_lru_[page] = 1;
  prev_[page] = tail_;
  next_[page] = kNone;
  (tail_ == kNone ? head_ : next_[tail_]) = page;
  tail_ = page;
  ++cached_;
}

PageId PagePool::evict_oldest_cached() {
  const PageId page = head_;
  lru_remove(page);
  free_.push_back(page);
  return page;
}

void PagePool::lru_remove(PageId page) {
  (prev_[page] == kNone ? head_ : next_[prev_[page]]) = next_[page];
  (next_[page] == kNone ? tail_ : prev_[next_[page]]) = prev_[page];
  prev_[page] = next_[page] = kNone;
  in_lru_[page] = 0;
  --cached_;
}

}  // namespace kvcache::paging
