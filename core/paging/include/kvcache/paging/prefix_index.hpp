// The prefix cache's index: full pages keyed by a hash chain over their token ids (the hash of
// page i covers its tokens and the hash of page i-1). Each entry keeps its tokens and parent
// hash, so a hash collision can never hand out the wrong page.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvcache/paging/page_pool.hpp"

namespace kvcache::paging {

class PrefixIndex {
 public:
  PrefixIndex(std::uint32_t total_pages, std::uint32_t page_size);

  static std::uint64_t chain(std::uint64_t parent, std::span<const std::int32_t> tokens);

  // Registers `page` for this (parent, tokens) unless an equal page is registered already.
  void publish(PageId page, std::uint64_t parent, std::uint64_t hash,
               std::span<const std::int32_t> tokens);
  std::optional<PageId> find(std::uint64_t parent, std::uint64_t hash,
                             std::span<const std::int32_t> tokens) const;
  void forget(PageId page);
  bool published(PageId page) const { return registered_[page] != 0; }

 private:
  std::uint32_t page_size_;
  std::unordered_map<std::uint64_t, PageId> by_hash_;
  std::vector<std::uint64_t> hash_;
  std::vector<std::uint64_t> parent_;
  std::vector<std::int32_t> tokens_;  // [page][page_size]
  std::vector<std::uint8_t> registered_;
};

}  // namespace kvcache::paging
