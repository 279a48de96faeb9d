// PageBook::truncate: a sequence cut back to its first tokens, as if the rest had never been
// reserved (a rollback of rejected draft tokens, or a step that did not finish).
#include <algorithm>
#include <string>

#include "kvcache/paging/page_book.hpp"
#include "kvcache/status.hpp"

namespace kvcache::paging {
namespace {

bool any_score(const std::vector<float>& scores) {
  return std::any_of(scores.begin(), scores.end(), [](float x) { return x != 0; });
}

}  // namespace

void PageBook::check_truncate(SeqId id, const Sequence& s, std::uint64_t keep) const {
  const std::string what = "cannot truncate sequence " + std::to_string(id) + " to " +
                           std::to_string(keep) + " tokens: ";
  // A grouping format reopens the group that `keep` falls in: its kept rows must still be in
  // the residual, which holds the group being filled and the one encoded before it.
  for (std::uint32_t layer = 0; layer < spec_.model.layers; ++layer) {
    for (const bool value : {false, true}) {
      const std::uint32_t g = token_group(value);
      if (g == 0 || keep % g == 0 || keep >= s.written[layer]) continue;
      const std::uint64_t group = keep / g, filling = s.written[layer] / g;
      if (group + 1 < filling || group * g < s.residual_from)
        throw Error(Code::unsupported, what + (value ? spec_.v_format : spec_.k_format) +
                                           " has already encoded the group of tokens " +
                                           std::to_string(group * g) + ".." +
                                           std::to_string((group + 1) * g) +
                                           " and keeps the rows of its last encoded group only");
    }
  }
  if (!any_score(s.scores)) return;
  const bool marked = std::any_of(s.score_marks.begin(), s.score_marks.end(),
                                  [&](const Sequence::ScoreMark& m) { return m.length == keep; });
  if (!marked) {
    std::string starts;
    for (const Sequence::ScoreMark& m : s.score_marks)
      starts += (starts.empty() ? "" : ", ") + std::to_string(m.length);
    throw Error(Code::unsupported,
                what +
                    "its attention scores can be given back only to a length where one of "
                    "its last " +
                    std::to_string(kScoreMarks) + " steps began (" +
                    (starts.empty() ? std::string("none kept") : starts) + ")");
  }
}

void PageBook::truncate(SeqId id, std::uint64_t keep) {
  Sequence& s = find(id);
  if (keep > s.length)
    throw Error(Code::invalid_argument, "cannot truncate sequence " + std::to_string(id) + " to " +
                                            std::to_string(keep) + " tokens: it holds " +
                                            std::to_string(s.length));
  if (keep == s.length) return;
  check_truncate(id, s, keep);
  const std::uint32_t page_size = spec_.page_size;
  if (any_score(s.scores)) {
    while (s.score_marks.back().length != keep) s.score_marks.pop_back();
    s.scores = std::move(s.score_marks.back().scores);
    s.score_marks.pop_back();  // the next reserve at this length marks it again
  } else {
    s.scores.resize(keep);
    while (!s.score_marks.empty() && s.score_marks.back().length >= keep) s.score_marks.pop_back();
  }
  ++s.shape;
  s.next_position = positions_of(s.pages[keep / page_size])[keep % page_size];
  const std::uint64_t kept_pages = (keep + page_size - 1) / page_size;
  // Last page first, as release does: a published chain is reclaimed from its leaf.
  for (std::size_t i = s.pages.size(); i-- > kept_pages;) release_page(s.pages[i]);
  s.pages.resize(kept_pages);
  // A page kept in part is written again by later appends. A private one is cut here (its
  // padding poisoned when asked); a shared or published one keeps its contents for its other
  // holders, and reserve copies it first.
  if (keep % page_size != 0 && !frozen(s.pages.back()) && spec_.poison_unused)
    poison(s.pages.back(), static_cast<std::uint32_t>(keep % page_size));
  s.length = keep;
  for (std::uint64_t& w : s.written) w = std::min(w, keep);
  // Positions from next_position on are handed out again, maybe to other tokens.
  s.chain.resize(std::min<std::size_t>(s.chain.size(), s.next_position / page_size));
}

}  // namespace kvcache::paging
