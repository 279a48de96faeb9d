#include "kvcache/paging/page_book.hpp"

#include <algorithm>
#include <map>
#include <string>

#include "kvcache/formats.hpp"
#include "kvcache/status.hpp"

namespace kvcache::paging {
namespace {

std::string pages_text(std::uint64_t n) {
  return std::to_string(n) + (n == 1 ? " page" : " pages");
}

const StoreSpec& validated(const StoreSpec& s) {
  const ModelShape& m = s.model;
  if (m.layers == 0 || m.q_heads == 0 || m.kv_heads == 0 || m.head_dim == 0)
    throw Error(Code::invalid_argument, "model shape must be positive in every field");
  if (m.q_heads % m.kv_heads != 0)
    throw Error(Code::invalid_argument, "q_heads must be a multiple of kv_heads");
  if (s.page_size == 0 || (s.page_size & (s.page_size - 1)) != 0 || s.page_size > 1024)
    throw Error(Code::invalid_argument, "page_size must be a power of two up to 1024");
  return s;
}

std::uint32_t page_count(const StoreSpec& s) {
  const std::uint64_t cost = page_cost(s);
  const std::uint64_t pages = s.capacity_bytes / cost;
  if (pages == 0)
    throw Error(Code::invalid_argument, "capacity of " + std::to_string(s.capacity_bytes) +
                                            " bytes holds no page (one page takes " +
                                            std::to_string(cost) + " bytes)");
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(pages, 0x7FFFFFFF));
}

std::uint32_t tokens_per_group(const StoreSpec& spec, bool value) {
  const FormatSpec f = store_format(spec, value).spec;
  return f.groups_tokens() ? f.group : 0;
}

}  // namespace

PageBook::PageBook(const StoreSpec& spec, PageMemory& memory)
    : spec_(validated(spec)),
      k_group_(tokens_per_group(spec, false)),
      v_group_(tokens_per_group(spec, true)),
      memory_(memory),
      pool_(page_count(spec_)),
      prefix_(pool_.total(), spec_.page_size),
      positions_(std::size_t{pool_.total()} * spec_.page_size, Position{-1}) {}

PageBook::Sequence& PageBook::find(SeqId id) {
  const auto it = sequences_.find(id);
  if (it == sequences_.end()) throw Error(Code::not_found, "no sequence " + std::to_string(id));
  return it->second;
}

const PageBook::Sequence& PageBook::find(SeqId id) const {
  return const_cast<PageBook*>(this)->find(id);
}

void PageBook::check_layer(std::uint32_t layer) const {
  if (layer >= spec_.model.layers)
    throw Error(Code::invalid_argument, "layer " + std::to_string(layer) + " out of range (" +
                                            std::to_string(spec_.model.layers) + " layers)");
}

void PageBook::check_tile(std::uint32_t page, std::uint32_t layer, std::uint32_t kv_head) const {
  if (page >= total_pages() || layer >= spec_.model.layers || kv_head >= spec_.model.kv_heads)
    throw Error(Code::invalid_argument, "read_tile: page, layer or head out of range");
}

bool PageBook::fully_written(const Sequence& s) const {
  return std::all_of(s.written.begin(), s.written.end(),
                     [&](std::uint64_t w) { return w == s.length; });
}

PageId PageBook::take_page() {
  if (pool_.free_count() == 0) prefix_.forget(pool_.evict_oldest_cached());
  const PageId page = pool_.allocate();
  if (spec_.poison_unused) poison(page, 0);
  return page;
}

void PageBook::release_page(PageId page) {
  pool_.release(page, spec_.prefix_caching && prefix_.published(page));
}

void PageBook::poison(PageId page, std::uint32_t from_slot) {
  memory_.poison(page, from_slot);
  std::fill(slot_positions(page) + from_slot, slot_positions(page) + spec_.page_size, Position{-1});
}

void PageBook::make_private(Sequence& s, std::size_t i) {
  const PageId copy = take_page();
  memory_.copy_page(s.pages[i], copy);
  std::copy_n(slot_positions(s.pages[i]), spec_.page_size, slot_positions(copy));
  release_page(s.pages[i]);
  s.pages[i] = copy;
}

StoreStats PageBook::stats(std::uint64_t page_bytes) const {
  StoreStats s;
  s.total_pages = pool_.total();
  s.free_pages = pool_.free_count();
  s.cached_pages = pool_.cached_count();
  s.used_pages = pool_.used_count();
  s.sequences = sequences_.size();
  s.page_bytes = page_bytes;
  // A page's occupied slots: the most that any of its holders uses (a holder may have truncated
  // into a page that another still uses whole).
  std::vector<std::uint32_t> fill(pool_.total(), 0);
  for (const auto& [id, seq] : sequences_)
    for (std::size_t i = 0; i < seq.pages.size(); ++i)
      fill[seq.pages[i]] =
          std::max(fill[seq.pages[i]],
                   static_cast<std::uint32_t>(std::min<std::uint64_t>(
                       spec_.page_size, seq.length - std::uint64_t{i} * spec_.page_size)));
  for (const std::uint32_t f : fill) s.occupied_slots += f;
  s.unused_slots = s.used_pages * spec_.page_size - s.occupied_slots;
  return s;
}

SeqId PageBook::create() {
  Sequence s;
  s.written.assign(spec_.model.layers, 0);
  const std::size_t rows = std::size_t{spec_.model.layers} * spec_.model.kv_heads;
  s.residual_k.assign(2 * rows * k_group_ * spec_.model.head_dim, 0);
  s.residual_v.assign(2 * rows * v_group_ * spec_.model.head_dim, 0);
  sequences_.emplace(next_id_, std::move(s));
  return next_id_++;
}

std::uint16_t* PageBook::residual_row(Sequence& s, std::uint32_t layer, std::uint32_t head,
                                      bool value, std::uint64_t slot) const {
  const std::uint32_t group = token_group(value);
  std::vector<std::uint16_t>& residual = value ? s.residual_v : s.residual_k;
  const std::size_t parity = slot / group % 2;
  return residual.data() +
         (((parity * spec_.model.layers + layer) * spec_.model.kv_heads + head) * group +
          slot % group) *
             spec_.model.head_dim;
}

void PageBook::release(SeqId id) {
  Sequence& s = find(id);
  // Last page first: it becomes the least recently cached, so a prefix chain is reclaimed from
  // its leaf and its root stays matchable longest.
  for (auto p = s.pages.rbegin(); p != s.pages.rend(); ++p) release_page(*p);
  sequences_.erase(id);
}

SeqId PageBook::fork(SeqId parent_id) {
  const Sequence& parent = find(parent_id);
  if (!fully_written(parent))
    throw Error(Code::invalid_argument, "cannot fork sequence " + std::to_string(parent_id) +
                                            " while reserved slots are unwritten");
  const SeqId id = next_id_;
  sequences_.emplace(id, parent);  // references into an unordered_map survive a rehash
  ++next_id_;
  for (PageId p : parent.pages) pool_.retain(p);
  return id;
}

void PageBook::reserve(std::span<const SeqId> ids, std::span<const std::uint32_t> tokens) {
  if (ids.size() != tokens.size())
    throw Error(Code::invalid_argument, "reserve: sequences and token counts differ in number");
  const std::uint32_t page_size = spec_.page_size;
  std::map<SeqId, std::uint64_t> growth;  // a sequence named twice grows by the sum
  for (std::size_t i = 0; i < ids.size(); ++i) {
    find(ids[i]);
    growth[ids[i]] += tokens[i];
  }
  std::uint64_t needed = 0;
  for (const auto& [id, n] : growth) {
    const Sequence& s = sequences_.at(id);
    const std::uint64_t pages_after = (s.length + n + page_size - 1) / page_size;
    needed += pages_after - s.pages.size();
    const bool shared_partial = n > 0 && s.length % page_size != 0 && frozen(s.pages.back());
    needed += shared_partial ? 1 : 0;  // copy-on-write of the last page
  }
  const std::uint64_t available = std::uint64_t{pool_.free_count()} + pool_.cached_count();
  if (needed > available)
    throw Error(Code::out_of_memory,
                "reserve needs " + pages_text(needed) + ", " + std::to_string(available) +
                    " available (" + std::to_string(pool_.free_count()) + " free, " +
                    std::to_string(pool_.cached_count()) + " cached); nothing was reserved");
  // All the memory the books need, before anything changes: a failure leaves nothing half done.
  std::map<SeqId, Sequence::ScoreMark> marks;
  for (const auto& [id, n] : growth) {
    Sequence& s = sequences_.at(id);
    s.pages.reserve((s.length + n + page_size - 1) / page_size);
    s.scores.reserve(s.length + n);
    if (n > 0 && std::any_of(s.scores.begin(), s.scores.end(), [](float x) { return x != 0; }))
      marks.emplace(id, Sequence::ScoreMark{s.length, s.scores});
  }
  for (auto& [id, mark] : marks) {
    std::deque<Sequence::ScoreMark>& kept = sequences_.at(id).score_marks;
    kept.push_back(std::move(mark));  // a deque's growth never moves the marks it holds
    if (kept.size() > kScoreMarks) kept.pop_front();
  }
  for (const auto& [id, n] : growth) {
    Sequence& s = sequences_.at(id);
    ++s.shape;
    if (n == 0) continue;
    if (s.length % page_size != 0 && frozen(s.pages.back())) make_private(s, s.pages.size() - 1);
    for (std::uint64_t t = 0; t < n; ++t) {
      const std::uint64_t slot = s.length + t;
      if (slot % page_size == 0) s.pages.push_back(take_page());
      const PageId page = s.pages.back();
      slot_positions(page)[slot % page_size] = s.next_position++;
    }
    s.length += n;
    s.scores.resize(s.length, 0.0f);
  }
}

std::vector<PageBook::Sequence*> PageBook::check_append(std::uint32_t layer,
                                                        std::span<const SeqId> ids,
                                                        std::span<const std::uint32_t> counts) {
  if (ids.size() != counts.size())
    throw Error(Code::invalid_argument, "append: sequences and counts differ in number");
  check_layer(layer);
  std::vector<Sequence*> seqs;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    Sequence& s = find(ids[i]);
    if (std::find(seqs.begin(), seqs.end(), &s) != seqs.end())
      throw Error(Code::invalid_argument,
                  "append: sequence " + std::to_string(ids[i]) + " appears twice in one batch");
    if (s.written[layer] + counts[i] > s.length)
      throw Error(Code::invalid_argument,
                  "append of " + std::to_string(counts[i]) + " tokens to sequence " +
                      std::to_string(ids[i]) + " layer " + std::to_string(layer) + " exceeds its " +
                      std::to_string(s.length - s.written[layer]) + " reserved unwritten slots");
    seqs.push_back(&s);
  }
  return seqs;
}

std::vector<Position> PageBook::positions(SeqId id) const {
  const Sequence& s = find(id);
  std::vector<Position> out(s.length);
  for (std::uint64_t slot = 0; slot < s.length; ++slot)
    out[slot] = positions_of(s.pages[slot / spec_.page_size])[slot % spec_.page_size];
  return out;
}

PageTable PageBook::page_table(std::span<const SeqId> ids) const {
  PageTable t;
  t.indptr.push_back(0);
  for (SeqId id : ids) {
    const Sequence& s = find(id);
    t.indices.insert(t.indices.end(), s.pages.begin(), s.pages.end());
    t.indptr.push_back(static_cast<std::int32_t>(t.indices.size()));
    t.last_page_len.push_back(
        s.pages.empty()
            ? 0
            : static_cast<std::int32_t>(s.length - (s.pages.size() - 1) * spec_.page_size));
  }
  return t;
}

}  // namespace kvcache::paging
