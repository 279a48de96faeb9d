// A Cache's sequences: made, forked, rolled back and released in every layer group at once.
#include <algorithm>

#include "cache/cache_impl.hpp"
#include "cache/windows.hpp"

namespace kvcache {

SeqId Cache::Impl::create(const SeqId* parent) {
  Group& first = groups.front();
  const SeqId id = parent != nullptr ? first.store->fork(*parent) : first.store->create_sequence();
  std::size_t made = 1;
  try {
    for (; made < groups.size(); ++made)
      parent != nullptr ? groups[made].map->fork_as(*parent, id) : groups[made].map->create_as(id);
    sequences[id];
    return id;
  } catch (...) {  // out of memory: the stores that made it give it back, so none disagree
    for (std::size_t g = 0; g < made; ++g) groups[g].store->release(id);
    throw;
  }
}

void Cache::Impl::forget(SeqId id) {
  for (Group& g : groups) g.store->release(id);
  sequences.erase(id);
}

std::vector<SeqId> Cache::sequences() const {
  const std::lock_guard lock(impl_->mutex);
  std::vector<SeqId> ids;
  for (const auto& [id, s] : impl_->sequences) ids.push_back(id);
  return ids;
}

SeqId Cache::add_sequence(std::int32_t priority) {
  if (priority < 0 || priority > 100)
    throw Error(Code::invalid_argument,
                "priority must be within 0..100, got " + std::to_string(priority));
  const std::lock_guard lock(impl_->mutex);
  const SeqId id = impl_->create(nullptr);
  SequenceInfo& s = impl_->info(id);
  s.priority = priority;
  s.created_step = s.last_used_step = impl_->step;
  return id;
}

void Cache::release(SeqId id) {
  const std::lock_guard lock(impl_->mutex);
  impl_->refuse_for_step_member("release", id);
  impl_->info(id);
  impl_->forget(id);
}

SeqId Cache::fork(SeqId parent) {
  const std::lock_guard lock(impl_->mutex);
  impl_->refuse_for_step_member("fork", parent);
  const SequenceInfo s = impl_->info(parent);
  const SeqId id = impl_->create(&parent);
  SequenceInfo& child = impl_->info(id);
  child.priority = s.priority;
  child.created_step = child.last_used_step = impl_->step;
  child.next_position = s.next_position;
  return id;
}

void Cache::truncate(SeqId id, std::uint64_t tokens) {
  const std::lock_guard lock(impl_->mutex);
  impl_->refuse_for_step_member("truncate", id);
  SequenceInfo& s = impl_->info(id);
  std::vector<Impl::Group>& groups = impl_->groups;
  // `tokens` counts the tokens of a group that keeps every one (the first group when all free
  // pages): the first `tokens` of its positions stay, in every group.
  const auto full = std::find_if(groups.begin(), groups.end(),
                                 [](const Impl::Group& g) { return !g.info.frees_pages; });
  const CacheStore& reference = *(full != groups.end() ? full : groups.begin())->store;
  const std::uint64_t held = reference.length(id);
  if (tokens > held)
    throw Error(Code::invalid_argument, "truncate: sequence " + std::to_string(id) + " holds " +
                                            std::to_string(held) + " tokens, cannot keep " +
                                            std::to_string(tokens));
  if (tokens == held) return;
  const Position next = reference.positions(id)[tokens];
  // Each group keeps its positions before `next`. A windowed group must still hold the window
  // a query at `next` sees; each group's store must agree before any changes (all or nothing).
  std::vector<std::uint64_t> keep;
  for (const Impl::Group& g : groups) {
    const std::vector<Position> positions = g.store->positions(id);
    keep.push_back(static_cast<std::uint64_t>(
        std::lower_bound(positions.begin(), positions.end(), next) - positions.begin()));
    if (!g.info.frees_pages) continue;
    if (const auto gone = windows::missing(*g.mask, positions, next))
      throw Error(Code::unsupported,
                  "truncate: layer group '" + g.info.name + "' has freed positions " +
                      std::to_string(gone->begin) + ".." + std::to_string(gone->end - 1) +
                      ", which the window of a query at " + std::to_string(next) +
                      " needs; a windowed group keeps only its window");
  }
  if (groups.size() > 1) {
    // A trial on a fork of each group's sequence: a store's own refusal (a grouping format's
    // encoded rows, scores) then leaves every group as it was.
    for (std::size_t g = 0; g < groups.size(); ++g) {
      CacheStore& kv = *groups[g].kv;
      const SeqId trial = kv.fork(groups[g].own(std::span<const SeqId>(&id, 1)).front());
      try {
        kv.truncate(trial, keep[g]);
      } catch (...) {
        kv.release(trial);
        throw;
      }
      kv.release(trial);
    }
  }
  for (std::size_t g = 0; g < groups.size(); ++g) groups[g].store->truncate(id, keep[g]);
  s.next_position = next;
  // Tokens from `next` on may differ from the ones declared (prefix.cpp).
  s.tokens.resize(std::min<std::size_t>(s.tokens.size(), static_cast<std::size_t>(next)));
  s.last_used_step = impl_->step;
}

}  // namespace kvcache
