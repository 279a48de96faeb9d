// PageBook's prefix cache: a sequence's full pages published under a hash chain of their tokens,
// matched by a later sequence with the same tokens, looked up, imported from another store (the
// remote tier), and the cached pages given back under pressure.
#include <algorithm>
#include <string>

#include "kvcache/paging/page_book.hpp"
#include "kvcache/status.hpp"

namespace kvcache::paging {

namespace {

// Extends `chain` (the prefix hash of each page of token_ids, in order) to `pages` pages.
void extend_chain(std::vector<std::uint64_t>& chain, std::span<const std::int32_t> token_ids,
                  std::uint64_t pages, std::uint32_t page_size) {
  chain.reserve(pages);
  for (std::uint64_t i = chain.size(); i < pages; ++i)
    chain.push_back(
        PrefixIndex::chain(i == 0 ? 0 : chain[i - 1], token_ids.subspan(i * page_size, page_size)));
}

}  // namespace

void PageBook::publish_prefix(SeqId id, std::span<const std::int32_t> token_ids) {
  Sequence& s = find(id);
  if (!spec_.prefix_caching) return;
  if (!s.exact)
    throw Error(Code::invalid_argument,
                "sequence " + std::to_string(id) +
                    " lost tokens to a drop; the tokens after them were computed without them, so "
                    "its pages cannot serve as a prefix");
  const std::uint32_t page_size = spec_.page_size;
  const std::uint64_t written_all = *std::min_element(s.written.begin(), s.written.end());
  const std::uint64_t pages = token_ids.size() / page_size;
  // Each full, written page that holds positions k * page_size onwards in order is page k of
  // token_ids; pages the window left behind are simply not held.
  for (std::uint64_t i = 0; (i + 1) * page_size <= written_all; ++i) {
    const PageId page = s.pages[i];
    if (prefix_.published(page)) continue;
    const Position* at = slot_positions(page);
    const auto k = static_cast<std::uint64_t>(at[0]) / page_size;
    if (k >= pages) break;  // positions only grow
    bool aligned = static_cast<std::uint64_t>(at[0]) == k * page_size;
    for (std::uint32_t slot = 1; slot < page_size && aligned; ++slot)
      aligned = at[slot] == at[0] + static_cast<Position>(slot);
    if (!aligned) continue;
    extend_chain(s.chain, token_ids, k + 1, page_size);  // before the index learns of the page
    prefix_.publish(page, k == 0 ? 0 : s.chain[k - 1], s.chain[k],
                    token_ids.subspan(k * page_size, page_size));
  }
}

PageBook::Sequence& PageBook::empty_sequence(SeqId id, const char* call) {
  Sequence& s = find(id);
  ++s.shape;
  if (s.length != 0)
    throw Error(Code::invalid_argument, std::string(call) + " needs an empty sequence; sequence " +
                                            std::to_string(id) + " holds " +
                                            std::to_string(s.length) + " tokens");
  return s;
}

void PageBook::hold_prefix(Sequence& s, Position next_position) {
  s.length = s.pages.size() * spec_.page_size;
  s.scores.assign(s.length, 0.0f);
  s.score_marks.clear();
  s.residual_from = s.length;
  s.next_position = next_position;
  std::fill(s.written.begin(), s.written.end(), s.length);
}

std::uint64_t PageBook::match_prefix(SeqId id, std::span<const std::int32_t> token_ids) {
  Sequence& s = empty_sequence(id, "match_prefix");
  if (!spec_.prefix_caching) return 0;
  const std::uint32_t page_size = spec_.page_size;
  // The memory the books need first: a page retained is always recorded.
  const std::size_t most = token_ids.size() / page_size;
  s.pages.reserve(most);
  s.chain.clear();
  s.chain.reserve(most);
  s.scores.reserve(most * page_size);
  std::uint64_t parent = 0;
  for (std::uint64_t i = 0; (i + 1) * page_size <= token_ids.size(); ++i) {
    const auto tokens = token_ids.subspan(i * page_size, page_size);
    const std::uint64_t hash = PrefixIndex::chain(parent, tokens);
    const auto page = prefix_.find(parent, hash, tokens);
    if (!page) break;
    pool_.retain(*page);
    s.pages.push_back(*page);
    s.chain.push_back(hash);
    parent = hash;
  }
  hold_prefix(s, static_cast<Position>(s.pages.size() * page_size));
  return s.length;
}

std::uint64_t PageBook::lookup_prefix(std::span<const std::int32_t> token_ids) const {
  if (!spec_.prefix_caching) return 0;
  const std::uint32_t page_size = spec_.page_size;
  std::uint64_t parent = 0, pages = 0;
  for (; (pages + 1) * page_size <= token_ids.size(); ++pages) {
    const auto tokens = token_ids.subspan(pages * page_size, page_size);
    const std::uint64_t hash = PrefixIndex::chain(parent, tokens);
    if (!prefix_.find(parent, hash, tokens)) break;
    parent = hash;
  }
  return pages * page_size;
}

std::vector<std::uint8_t> PageBook::prefix_pages(std::span<const std::int32_t> token_ids) const {
  const std::uint32_t page_size = spec_.page_size;
  std::vector<std::uint8_t> held(token_ids.size() / page_size, 0);
  if (!spec_.prefix_caching) return held;
  std::uint64_t parent = 0;
  for (std::uint64_t i = 0; i < held.size(); ++i) {
    const auto tokens = token_ids.subspan(i * page_size, page_size);
    const std::uint64_t hash = PrefixIndex::chain(parent, tokens);
    held[i] = prefix_.find(parent, hash, tokens) ? 1 : 0;
    parent = hash;
  }
  return held;
}

bool PageBook::attach_prefix(SeqId id, std::span<const std::int32_t> token_ids,
                             std::span<const std::uint64_t> pages) {
  Sequence& s = empty_sequence(id, "attach_prefix");
  const std::uint32_t page_size = spec_.page_size;
  const std::uint64_t count = token_ids.size() / page_size;
  if (token_ids.size() % page_size != 0)
    throw Error(Code::invalid_argument, "attach_prefix takes the tokens of whole pages; got " +
                                            std::to_string(token_ids.size()) +
                                            " tokens for pages of " + std::to_string(page_size));
  for (std::size_t i = 0; i < pages.size(); ++i)
    if (pages[i] >= count || (i > 0 && pages[i] <= pages[i - 1]))
      throw Error(Code::invalid_argument,
                  "attach_prefix: page " + std::to_string(pages[i]) +
                      " is not after the one before it within the tokens' " +
                      std::to_string(count) + " pages");
  if (!spec_.prefix_caching) return false;
  std::vector<std::uint64_t> chain;
  extend_chain(chain, token_ids, count, page_size);
  std::vector<PageId> found;
  found.reserve(pages.size());
  for (const std::uint64_t k : pages) {
    const auto page = prefix_.find(k == 0 ? 0 : chain[k - 1], chain[k],
                                   token_ids.subspan(k * page_size, page_size));
    if (!page) return false;
    found.push_back(*page);
  }
  // The memory first: a page retained is always recorded.
  s.scores.reserve(found.size() * page_size);
  for (const PageId page : found) pool_.retain(page);
  s.pages = std::move(found);
  s.chain = std::move(chain);
  hold_prefix(s, static_cast<Position>(token_ids.size()));
  return true;
}

PageImport PageBook::import_page(std::span<const std::int32_t> token_ids,
                                 std::span<const std::byte> image) {
  const std::uint32_t page_size = spec_.page_size;
  if (token_ids.empty() || token_ids.size() % page_size != 0)
    throw Error(Code::invalid_argument, "import_page takes the tokens of whole pages; got " +
                                            std::to_string(token_ids.size()) +
                                            " tokens for pages of " + std::to_string(page_size));
  if (!spec_.prefix_caching)
    throw Error(Code::unsupported, "import_page: this store keeps no prefix cache");
  const std::uint64_t index = token_ids.size() / page_size - 1;
  const std::span<const std::uint64_t> chain = import_chain(token_ids, index);
  const std::uint64_t parent = index == 0 ? 0 : chain[index - 1], hash = chain[index];
  const auto tokens = token_ids.subspan(index * page_size, page_size);
  if (prefix_.find(parent, hash, tokens)) return PageImport::present;
  if (pool_.free_count() == 0 && pool_.cached_count() == 0) return PageImport::no_room;
  const PageId page = take_page();
  try {
    memory_.write_page(page, image);
  } catch (...) {
    pool_.release(page, false);
    throw;
  }
  Position* at = slot_positions(page);
  for (std::uint32_t slot = 0; slot < page_size; ++slot)
    at[slot] = static_cast<Position>(index * page_size + slot);
  prefix_.publish(page, parent, hash, tokens);
  release_page(page);  // published: it stays, cached
  return PageImport::imported;
}

std::span<const std::uint64_t> PageBook::import_chain(std::span<const std::int32_t> token_ids,
                                                      std::uint64_t last) {
  const std::uint32_t page_size = spec_.page_size;
  auto& [tokens, hashes] = last_import_;
  std::uint64_t same = 0;
  while (same < hashes.size() && same <= last &&
         std::equal(token_ids.begin() + static_cast<std::ptrdiff_t>(same * page_size),
                    token_ids.begin() + static_cast<std::ptrdiff_t>((same + 1) * page_size),
                    tokens.begin() + static_cast<std::ptrdiff_t>(same * page_size)))
    ++same;
  hashes.resize(same);
  tokens.resize(same * page_size);
  for (std::uint64_t i = same; i <= last; ++i) {
    const auto page = token_ids.subspan(i * page_size, page_size);
    tokens.insert(tokens.end(), page.begin(), page.end());  // first: never fewer than hashes
    hashes.push_back(PrefixIndex::chain(i == 0 ? 0 : hashes[i - 1], page));
  }
  return std::span<const std::uint64_t>(hashes).first(last + 1);
}

std::uint64_t PageBook::evict_cached(std::uint64_t count) {
  std::uint64_t evicted = 0;
  for (; evicted < count && pool_.cached_count() > 0; ++evicted)
    prefix_.forget(pool_.evict_oldest_cached());
  return evicted;
}

}  // namespace kvcache::paging
