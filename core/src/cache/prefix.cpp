// Prefix reuse through the Cache: one store's prefix cache when every layer shares one, and across
// layer groups a hit as long as every group can serve it (docs/cache.md, "Prefix reuse with layer
// groups"). A windowed group needs only the pages a query at the hit's end sees.
#include <algorithm>

#include <spdlog/spdlog.h>

#include "cache/cache_impl.hpp"
#include "cache/windows.hpp"

namespace kvcache {

Cache::Impl::PrefixHit Cache::Impl::prefix_hit(std::span<const std::int32_t> token_ids) const {
  std::uint64_t most = token_ids.size() / page_size;
  const auto whole = token_ids.first(most * page_size);
  std::vector<std::vector<std::uint8_t>> held;
  for (const Group& g : groups) {
    held.push_back(g.store->prefix_pages(whole));
    if (g.info.frees_pages) continue;
    // A group that keeps every token needs the pages from the first on.
    const auto gap = std::find(held.back().begin(), held.back().end(), std::uint8_t{0});
    most = std::min<std::uint64_t>(most, static_cast<std::uint64_t>(gap - held.back().begin()));
  }
  PrefixHit hit;
  hit.pages.resize(groups.size());
  for (std::uint64_t pages = most; pages > 0; --pages) {
    bool served = true;
    for (std::size_t g = 0; g < groups.size() && served; ++g) {
      if (!groups[g].info.frees_pages) continue;
      hit.pages[g] =
          windows::pages_seen(*groups[g].mask, static_cast<Position>(pages * page_size), page_size);
      served = std::all_of(hit.pages[g].begin(), hit.pages[g].end(),
                           [&](std::uint64_t page) { return held[g][page] != 0; });
    }
    if (served) {
      hit.tokens = pages * page_size;
      return hit;
    }
  }
  return {};
}

bool Cache::Impl::attach(SeqId id, std::span<const std::int32_t> token_ids, const PrefixHit& hit) {
  const auto tokens = token_ids.first(hit.tokens);
  // The mapped groups first, the first group last: a mapped group can be emptied by making its
  // sequence anew, and the first group's own failure leaves nothing or a run from position 0.
  std::vector<std::size_t> order;
  for (std::size_t g = 1; g < groups.size(); ++g) order.push_back(g);
  order.push_back(0);
  const auto empty = [&](std::size_t g) {
    if (groups[g].map == nullptr) return groups[g].store->truncate(id, 0);
    groups[g].store->release(id);
    groups[g].map->create_as(id);
  };
  for (std::size_t done = 0; done < order.size(); ++done) {
    const std::size_t g = order[done];
    const bool attached = groups[g].info.frees_pages
                              ? groups[g].store->attach_prefix(id, tokens, hit.pages[g])
                              : groups[g].store->match_prefix(id, tokens) == hit.tokens;
    if (attached) continue;
    spdlog::warn(
        "prefix: layer group '{}' did not attach the {} tokens its store said it held; a "
        "miss",
        groups[g].info.name, hit.tokens);
    for (std::size_t undo = 0; undo <= done; ++undo) empty(order[undo]);
    return false;
  }
  return true;
}

std::uint64_t Cache::match_prefix(SeqId id, std::span<const std::int32_t> token_ids) {
  const std::lock_guard lock(impl_->mutex);
  impl_->refuse_for_step_member("match_prefix", id);
  SequenceInfo& s = impl_->info(id);
  std::uint64_t matched = 0;
  if (impl_->groups.size() == 1) {
    matched = impl_->groups.front().store->match_prefix(id, token_ids);
  } else {
    if (impl_->frees_pages) s.tokens.assign(token_ids.begin(), token_ids.end());
    const Impl::PrefixHit hit = impl_->prefix_hit(token_ids);
    if (hit.tokens > 0 && impl_->attach(id, token_ids, hit)) matched = hit.tokens;
  }
  s.next_position = static_cast<Position>(matched);
  s.last_used_step = impl_->step;
  return matched;
}

void Cache::publish_prefix(SeqId id, std::span<const std::int32_t> token_ids) {
  const std::lock_guard lock(impl_->mutex);
  impl_->refuse_for_step_member("publish_prefix", id);
  SequenceInfo& s = impl_->info(id);
  if (impl_->frees_pages) s.tokens.assign(token_ids.begin(), token_ids.end());
  for (Impl::Group& g : impl_->groups) g.store->publish_prefix(id, token_ids);
}

std::uint64_t Cache::lookup_prefix(std::span<const std::int32_t> token_ids) {
  const std::lock_guard lock(impl_->mutex);
  const Impl::Group& first = impl_->groups.front();
  if (impl_->groups.size() > 1) return impl_->prefix_hit(token_ids).tokens;
  return first.tier != nullptr ? first.tier->remote_lookup(token_ids)
                               : first.store->lookup_prefix(token_ids);
}

bool Cache::flush_remote(std::chrono::milliseconds deadline) {
  // Not under the Cache's lock: the writer needs none, and steps may go on meanwhile.
  const auto until = std::chrono::steady_clock::now() + deadline;
  bool flushed = true;
  for (const Impl::Group& g : impl_->groups)
    if (g.tier != nullptr)
      flushed = g.tier->flush(std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::max(until - std::chrono::steady_clock::now(),
                             std::chrono::steady_clock::duration::zero()))) &&
                flushed;
  return flushed;
}

// Every group's tier, counted together; the latencies are the slowest group's.
std::optional<remote::TierStats> Cache::remote_stats() const {
  std::optional<remote::TierStats> sum;
  for (const Impl::Group& g : impl_->groups) {
    if (g.tier == nullptr) continue;
    const remote::TierStats s = g.tier->tier_stats();
    if (!sum) {
      sum = s;
      continue;
    }
    for (auto [to, from] : {std::pair{&sum->lookups, s.lookups},
                            {&sum->hit_pages, s.hit_pages},
                            {&sum->miss_pages, s.miss_pages},
                            {&sum->corrupt, s.corrupt},
                            {&sum->no_room, s.no_room},
                            {&sum->failures, s.failures},
                            {&sum->skipped, s.skipped},
                            {&sum->queued_pages, s.queued_pages},
                            {&sum->written_pages, s.written_pages},
                            {&sum->present_pages, s.present_pages},
                            {&sum->dropped_writes, s.dropped_writes},
                            {&sum->bytes_read, s.bytes_read},
                            {&sum->bytes_written, s.bytes_written}})
      *to += from;
    sum->lookup_p50_us = std::max(sum->lookup_p50_us, s.lookup_p50_us);
    sum->lookup_p99_us = std::max(sum->lookup_p99_us, s.lookup_p99_us);
  }
  return sum;
}

}  // namespace kvcache
