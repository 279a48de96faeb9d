// The bookkeeping of a paged CacheStore, whatever memory its pages live in: sequences and their
// page lists, the page pool, the prefix index, each slot's logical position, all-or-nothing
// reserves, fork with copy-on-write, and drop with compaction. Every backend's store is this
// book plus a PageMemory (host memory on cpu-tbb, device memory on the GPU backends), so a page
// means the same everywhere. Out-of-tree backends may build on it too.
//
// Not thread-safe: the store serializes structural calls (and lets appends share a lock).
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvcache/cache_store.hpp"
#include "kvcache/paging/page_pool.hpp"
#include "kvcache/paging/prefix_index.hpp"

namespace kvcache::paging {

// One slot's K and V (every layer, every head) moving to another place during compaction.
struct SlotMove {
  PageId from_page;
  std::uint32_t from_slot;
  PageId to_page;
  std::uint32_t to_slot;
};

// What the memory behind a book does when the book rearranges pages.
class PageMemory {
 public:
  virtual ~PageMemory() = default;
  // Fills slots [from_slot, page_size) of every tile of `page` with 0xFF bytes (NaN in every
  // float format); from 0, the whole tile including per-group data. Called only when the spec
  // asks for poisoned padding.
  virtual void poison(PageId page, std::uint32_t from_slot) = 0;
  virtual void copy_page(PageId from, PageId to) = 0;
  // Moves towards the front of one sequence, applied as if one after the other: a destination
  // may be the source of an earlier move, never of a later one.
  virtual void move_slots(std::span<const SlotMove> moves) = 0;
  // A page's image (CacheStore::export_page): every layer's K tiles of each KV head, then V's.
  // The defaults refuse (Error(unsupported)): a store that keeps them has no remote tier.
  virtual void read_page(PageId page, std::span<std::byte> image) const {
    (void)image;
    throw Error(Code::unsupported,
                "this store cannot copy pages out (page " + std::to_string(page) + ")");
  }
  virtual void write_page(PageId page, std::span<const std::byte> image) {
    (void)image;
    throw Error(Code::unsupported,
                "this store cannot copy pages in (page " + std::to_string(page) + ")");
  }
};

class PageBook {
 public:
  struct Sequence {
    std::vector<PageId> pages;
    std::uint64_t length = 0;            // reserved slots
    std::vector<std::uint64_t> written;  // per layer: slots that hold K and V
    Position next_position = 0;
    // Counts the calls that changed this sequence's shape (reserve, drop, prefix match): a
    // step's plan made at one count is stale at any other.
    std::uint64_t shape = 0;
    // Every held token was computed from all the tokens before it that its mask lets it see: no
    // drop but the unseen kind (a window's) took any away. Only such a sequence publishes.
    bool exact = true;
    // The prefix hash of pages 0, 1, ... of the tokens published or matched: by position, so it
    // holds for pages the sequence no longer has.
    std::vector<std::uint64_t> chain;
    // Accumulated attention weight per slot. Kept per sequence, not per page: sequences that
    // share pages (fork, prefix) must not add to each other's scores.
    std::vector<float> scores;
    // The scores as they stood when each of the latest reserves began (a step), kept while the
    // sequence has scores, so that truncate can give them back: a query's weights are summed
    // into every key it saw and cannot be taken out again one query at a time.
    struct ScoreMark {
      std::uint64_t length;
      std::vector<float> scores;
    };
    std::deque<ScoreMark> score_marks;
    // Rows a store holds back, for formats that encode groups of tokens (kivi-k), in fp16,
    // [group parity][layer][kv_head][group][head_dim]: the group being filled and, in the other
    // parity, the one encoded last, so that truncate can reopen it bit for bit. The book copies
    // them on fork. Slots before residual_from were never written through this sequence (a
    // prefix match), so the residual holds no rows of theirs.
    std::vector<std::uint16_t> residual_k;
    std::vector<std::uint16_t> residual_v;
    std::uint64_t residual_from = 0;
  };

  // How many step starts of a sequence keep their scores for truncate (ScoreMark).
  static constexpr std::size_t kScoreMarks = 16;

  // Validates the spec and sizes the pool from capacity_bytes / page_cost(spec).
  PageBook(const StoreSpec& spec, PageMemory& memory);

  const StoreSpec& spec() const { return spec_; }
  std::uint32_t page_size() const { return spec_.page_size; }
  std::uint32_t total_pages() const { return pool_.total(); }
  StoreStats stats(std::uint64_t page_bytes) const;

  // A new empty sequence; with its residual rows sized when a format groups tokens.
  SeqId create();
  void release(SeqId id);
  SeqId fork(SeqId parent);
  void reserve(std::span<const SeqId> ids, std::span<const std::uint32_t> tokens);
  // The sequences of an append, in order, after checking that each appears once and has
  // `counts[i]` reserved unwritten slots in `layer`. The caller advances `written` when done.
  std::vector<Sequence*> check_append(std::uint32_t layer, std::span<const SeqId> ids,
                                      std::span<const std::uint32_t> counts);
  // Keeps the first `tokens` slots of `id` and gives back the rest, written or not, as if they
  // had never been reserved (a rollback, or a step that did not finish): pages past the new
  // length return to the pool (cached if published), positions are handed out again, and the
  // scores and a grouping format's residual rows are as they were at that length. A page kept in
  // part that is shared (a fork) or published is left as it is; the next reserve copies it. All
  // or nothing: refused (Error(unsupported)) when scores cannot be given back (the length is not
  // one where one of the last kScoreMarks steps began) or a grouping format would have to reopen
  // a group older than the one it encoded last.
  void truncate(SeqId id, std::uint64_t tokens);
  // Error(unsupported) for a format that groups tokens: its scales span a group. `unseen`: the
  // positions are ones no later query sees and no later token was computed from
  // (CacheStore::drop_unseen), so the sequence may still publish.
  std::uint64_t drop(SeqId id, std::span<const PositionRange> ranges, bool unseen = false);
  std::vector<Position> positions(SeqId id) const;
  void publish_prefix(SeqId id, std::span<const std::int32_t> token_ids);
  std::uint64_t match_prefix(SeqId id, std::span<const std::int32_t> token_ids);
  std::uint64_t lookup_prefix(std::span<const std::int32_t> token_ids) const;
  std::vector<std::uint8_t> prefix_pages(std::span<const std::int32_t> token_ids) const;
  bool attach_prefix(SeqId id, std::span<const std::int32_t> token_ids,
                     std::span<const std::uint64_t> pages);
  // CacheStore::import_page: `image` (page_image_bytes long, checked by the caller) becomes the
  // cached published page of token_ids' last full page.
  PageImport import_page(std::span<const std::int32_t> token_ids, std::span<const std::byte> image);
  std::uint64_t evict_cached(std::uint64_t count);
  PageTable page_table(std::span<const SeqId> ids) const;

  // Formats that group tokens (kivi-k): the group size of K or V, else 0. Slots from
  // held_from() on wait in the sequence's residual rows until their group is complete.
  std::uint32_t token_group(bool value) const { return value ? v_group_ : k_group_; }
  std::uint64_t held_from(const Sequence& s, std::uint32_t layer, bool value) const {
    const std::uint32_t g = token_group(value);
    return g == 0 ? s.written[layer] : s.written[layer] / g * g;
  }
  // The first slot whose fp16 row a store keeps in the residual after an append that ends at
  // slot `end`: the rows of the group being filled and of the one before it (for truncate).
  std::uint64_t kept_rows_from(std::uint64_t end, bool value) const {
    const std::uint64_t g = token_group(value), filling = end / g * g;
    return filling >= g ? filling - g : 0;
  }
  // The fp16 residual row of (layer, head, K or V) for `slot` of the group being filled or of the
  // one encoded last.
  std::uint16_t* residual_row(Sequence& s, std::uint32_t layer, std::uint32_t head, bool value,
                              std::uint64_t slot) const;
  const std::uint16_t* residual_row(const Sequence& s, std::uint32_t layer, std::uint32_t head,
                                    bool value, std::uint64_t slot) const {
    return residual_row(const_cast<Sequence&>(s), layer, head, value, slot);
  }

  // Whether `id` is a live sequence.
  bool contains(SeqId id) const { return sequences_.contains(id); }
  // The sequence, or null when there is none.
  const Sequence* find_if(SeqId id) const {
    const auto it = sequences_.find(id);
    return it == sequences_.end() ? nullptr : &it->second;
  }

  Sequence& find(SeqId id);
  const Sequence& find(SeqId id) const;
  void check_layer(std::uint32_t layer) const;
  // What read_tile checks first: Error(invalid_argument) unless page, layer and KV head exist.
  void check_tile(std::uint32_t page, std::uint32_t layer, std::uint32_t kv_head) const;
  const Position* positions_of(PageId page) const {
    return positions_.data() + std::size_t{page} * spec_.page_size;
  }

 private:
  bool fully_written(const Sequence& s) const;
  // The sequence a prefix attaches to (its shape counted), refused unless it holds nothing.
  Sequence& empty_sequence(SeqId id, const char* call);
  // After a prefix attached s.pages: the sequence holds them whole, written in every layer, with
  // no scores yet, and its next position is `next_position`.
  void hold_prefix(Sequence& s, Position next_position);
  // A page that must not be written through: shared with another sequence or published.
  bool frozen(PageId page) const { return pool_.refs(page) > 1 || prefix_.published(page); }
  // truncate's checks: Error(unsupported) unless `s` can be cut to `keep` slots.
  void check_truncate(SeqId id, const Sequence& s, std::uint64_t keep) const;
  // A page for writing: a free one, else the oldest cached one (forgotten by the prefix index).
  PageId take_page();
  void release_page(PageId page);
  void poison(PageId page, std::uint32_t from_slot);
  // Replaces a shared page of `s` at index i by a private copy.
  void make_private(Sequence& s, std::size_t i);
  Position* slot_positions(PageId page) {
    return positions_.data() + std::size_t{page} * spec_.page_size;
  }
  // The chain hashes of token_ids' pages up to page `last`, from those of the last import where
  // its pages are the same: a pull imports page i of a prompt after page i - 1, and hashing the
  // whole prefix again for each would be quadratic in the prompt's pages.
  std::span<const std::uint64_t> import_chain(std::span<const std::int32_t> token_ids,
                                              std::uint64_t last);

  StoreSpec spec_;
  std::uint32_t k_group_ = 0, v_group_ = 0;  // see token_group()
  PageMemory& memory_;
  PagePool pool_;
  PrefixIndex prefix_;
  std::vector<Position> positions_;  // [page][slot]
  std::unordered_map<SeqId, Sequence> sequences_;
  SeqId next_id_ = 1;
  struct {
    std::vector<std::int32_t> tokens;   // of whole pages
    std::vector<std::uint64_t> hashes;  // a chain hash per page
  } last_import_;
};

}  // namespace kvcache::paging
