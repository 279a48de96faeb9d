// PageBook::drop: positions taken out of a sequence (an eviction policy's drops, a sliding
// group's pages behind its window). Whole pages leave the table and nothing moves; otherwise the
// kept slots are compacted to the front.
#include <algorithm>
#include <string>

#include "kvcache/paging/page_book.hpp"
#include "kvcache/status.hpp"

namespace kvcache::paging {

std::uint64_t PageBook::drop(SeqId id, std::span<const PositionRange> ranges, bool unseen) {
  Sequence& s = find(id);
  ++s.shape;
  for (const bool value : {false, true})
    if (token_group(value) != 0)
      throw Error(Code::unsupported, "cannot drop tokens stored as " +
                                         (value ? spec_.v_format : spec_.k_format) +
                                         ": its scales span groups of tokens");
  if (!fully_written(s))
    throw Error(Code::invalid_argument, "cannot drop from sequence " + std::to_string(id) +
                                            " while reserved slots are unwritten");
  const std::uint32_t page_size = spec_.page_size;
  std::vector<bool> dropped(s.length);
  for (std::uint64_t slot = 0; slot < s.length; ++slot) {
    const Position p = slot_positions(s.pages[slot / page_size])[slot % page_size];
    dropped[slot] = std::any_of(ranges.begin(), ranges.end(),
                                [&](const PositionRange& r) { return p >= r.begin && p < r.end; });
  }
  const auto first_it = std::find(dropped.begin(), dropped.end(), true);
  if (first_it == dropped.end()) return 0;
  const std::uint64_t first = static_cast<std::uint64_t>(first_it - dropped.begin());
  const std::uint64_t removed =
      static_cast<std::uint64_t>(std::count(first_it, dropped.end(), true));
  const std::uint64_t new_length = s.length - removed;

  std::vector<float> scores;
  scores.reserve(new_length);
  for (std::uint64_t slot = 0; slot < s.length; ++slot)
    if (!dropped[slot]) scores.push_back(s.scores[slot]);

  // Each page dropped whole or kept whole: the table loses the dropped ones, and the kept slots
  // keep their offsets within their pages, so no tile changes.
  bool whole_pages = true;
  for (std::uint64_t begin = 0; begin < s.length && whole_pages; begin += page_size) {
    const auto from = dropped.begin() + static_cast<std::ptrdiff_t>(begin);
    const auto to =
        dropped.begin() + static_cast<std::ptrdiff_t>(std::min(s.length, begin + page_size));
    whole_pages = std::all_of(from, to, [&](bool d) { return d == *from; });
  }
  if (whole_pages) {
    std::vector<PageId> kept;
    kept.reserve(s.pages.size());
    for (std::size_t i = 0; i < s.pages.size(); ++i)
      if (!dropped[i * page_size]) kept.push_back(s.pages[i]);
    for (std::size_t i = 0; i < s.pages.size(); ++i)
      if (dropped[i * page_size]) release_page(s.pages[i]);
    s.pages = std::move(kept);
  } else {
    const std::uint64_t new_pages = (new_length + page_size - 1) / page_size;
    // Pages from the first changed one on are rewritten: shared ones need private copies first.
    std::uint64_t copies = 0;
    for (std::size_t i = first / page_size; i < new_pages; ++i)
      copies += pool_.refs(s.pages[i]) > 1;
    const std::uint64_t available = std::uint64_t{pool_.free_count()} + pool_.cached_count();
    if (copies > available)
      throw Error(Code::out_of_memory,
                  "drop needs " + std::to_string(copies) + " pages to copy shared pages, " +
                      std::to_string(available) + " available; nothing was dropped");
    std::vector<SlotMove> moves;
    moves.reserve(new_length - first);
    for (std::size_t i = first / page_size; i < new_pages; ++i) {
      if (pool_.refs(s.pages[i]) > 1) {
        make_private(s, i);
      } else {
        prefix_.forget(s.pages[i]);  // its contents change: it no longer matches its hash
      }
    }
    std::uint64_t to = first;
    for (std::uint64_t from = first + 1; from < s.length; ++from) {
      if (dropped[from]) continue;
      const SlotMove m{s.pages[from / page_size], static_cast<std::uint32_t>(from % page_size),
                       s.pages[to / page_size], static_cast<std::uint32_t>(to % page_size)};
      slot_positions(m.to_page)[m.to_slot] = slot_positions(m.from_page)[m.from_slot];
      moves.push_back(m);
      ++to;
    }
    memory_.move_slots(moves);
    for (std::size_t i = new_pages; i < s.pages.size(); ++i) release_page(s.pages[i]);
    s.pages.resize(new_pages);
    if (new_pages > 0 && spec_.poison_unused)
      poison(s.pages.back(), static_cast<std::uint32_t>(new_length - (new_pages - 1) * page_size));
  }
  s.scores = std::move(scores);
  s.score_marks.clear();  // slots moved: the marks' scores no longer line up with them
  s.length = new_length;
  std::fill(s.written.begin(), s.written.end(), new_length);
  s.exact = s.exact && unseen;
  return removed;
}

}  // namespace kvcache::paging
