#include "kvcache/paging/prefix_index.hpp"

#include <algorithm>

namespace kvcache::paging {

PrefixIndex::PrefixIndex(std::uint32_t total_pages, std::uint32_t page_size)
    : page_size_(page_size),
      hash_(total_pages, 0),
      parent_(total_pages, 0),
      tokens_(std::size_t{total_pages} * page_size, 0),
      registered_(total_pages, 0) {}

std::uint64_t PrefixIndex::chain(std::uint64_t parent, std::span<const std::int32_t> tokens) {
  // FNV-1a over the parent hash and the token ids, then a splitmix64 finalizer.
  std::uint64_t h = 1469598103934665603ull ^ parent;
  for (std::int32_t t : tokens) {
    h ^= static_cast<std::uint32_t>(t);
    h *= 1099511628211ull;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

void PrefixIndex::publish(PageId page, std::uint64_t parent, std::uint64_t hash,
                          std::span<const std::int32_t> tokens) {
  if (registered_[page] || by_hash_.contains(hash)) return;
  by_hash_.emplace(hash, page);
  hash_[page] = hash;
  parent_[page] = parent;
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + std::size_t{page} * page_size_);
  registered_[page] = 1;
}

std::optional<PageId> PrefixIndex::find(std::uint64_t parent, std::uint64_t hash,
                                        std::span<const std::int32_t> tokens) const {
  const auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  const PageId page = it->second;
  const auto stored = tokens_.begin() + std::size_t{page} * page_size_;
  if (parent_[page] != parent || !std::equal(tokens.begin(), tokens.end(), stored))
    return std::nullopt;
  return page;
}

void PrefixIndex::forget(PageId page) {
  if (!registered_[page]) return;
  by_hash_.erase(hash_[page]);
  registered_[page] = 0;
}

}  // namespace kvcache::paging
