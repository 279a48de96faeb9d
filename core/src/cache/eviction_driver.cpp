// The eviction driver: reserves room in every layer group, asks the policy when a group's pool
// runs short, carries out its plan and reports exactly what it removed.
#include <algorithm>
#include <map>
#include <new>
#include <unordered_map>
#include <utility>

#include <spdlog/spdlog.h>

#include "cache/cache_impl.hpp"
#include "cache/windows.hpp"

namespace kvcache {

namespace {

// Per-token detail for the policy, read from the store on demand.
class StoreTokens final : public TokenSource {
 public:
  explicit StoreTokens(const CacheStore& store) : store_(store) {}
  TokenDetail tokens(SeqId id) const override {
    auto& cached = cache_[id];
    if (cached.first.empty()) {
      cached.first = store_.positions(id);
      cached.second = store_.scores(id);
    }
    return {cached.first, cached.second};
  }

 private:
  const CacheStore& store_;
  mutable std::unordered_map<SeqId, std::pair<std::vector<Position>, std::vector<float>>> cache_;
};

// A reserve that `group` refused for want of pages (the groups before it were undone).
struct Refusal {
  std::size_t group;
  Error error;
};

}  // namespace

template <class Decide>
bool Cache::Impl::consult(std::size_t g, Decide&& decide, EvictionReport& report) {
  const CacheStore& store = *groups[g].store;
  std::vector<SequenceState> states;
  const StoreStats st = store.stats();
  for (const auto& [id, s] : sequences) {
    const std::uint64_t tokens = store.length(id);
    states.push_back({id, tokens, (tokens + page_size - 1) / page_size, s.priority, s.created_step,
                      s.last_used_step, s.next_position});
  }
  const StoreTokens tokens(store);
  const CacheState state{page_size,       step,   st.total_pages, st.free_pages,
                         st.cached_pages, states, &tokens};
  const EvictionPlan plan = decide(state);
  const std::size_t preempted = report.preempted.size(), dropped = report.dropped.size();
  const std::uint64_t freed = report.cached_pages_freed;
  apply(g, plan, report);
  return report.preempted.size() != preempted || report.dropped.size() != dropped ||
         report.cached_pages_freed != freed;
}

void Cache::Impl::apply(std::size_t g, const EvictionPlan& plan, EvictionReport& report) {
  CacheStore& store = *groups[g].store;
  // Room in the report first: once the store has removed something, recording it must not fail.
  report.preempted.reserve(report.preempted.size() + plan.preempt.size());
  if (plan.free_cached_pages > 0)
    report.cached_pages_freed += store.evict_cached(plan.free_cached_pages);
  for (SeqId id : plan.preempt) {
    if (!sequences.contains(id)) continue;
    forget(id);
    report.preempted.push_back(id);
  }
  std::map<SeqId, std::vector<PositionRange>> drops;
  for (const DroppedRange& d : plan.drop)
    if (sequences.contains(d.sequence)) drops[d.sequence].push_back(d.range);
  // Dropped tokens leave every layer, as in a cache of one group: each group drops what it holds
  // of the ranges, and the report names each position once.
  for (const auto& [id, ranges] : drops) {
    const auto within = [&](Position p) {
      return std::any_of(ranges.begin(), ranges.end(),
                         [&](const PositionRange& r) { return p >= r.begin && p < r.end; });
    };
    // What the drop removes: the held positions within the ranges, known before it happens.
    std::vector<std::vector<Position>> gone(groups.size());
    std::vector<Position> all;
    for (std::size_t h = 0; h < groups.size(); ++h) {
      gone[h] = groups[h].store->positions(id);
      std::erase_if(gone[h], [&](Position p) { return !within(p); });
      all.insert(all.end(), gone[h].begin(), gone[h].end());
    }
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    const std::vector<PositionRange> removed = ranges_of(all);
    report.dropped.reserve(report.dropped.size() + removed.size());
    sequences.at(id).tokens.clear();  // its pages can no longer serve as a prefix
    // The group the policy saw first: its refusal (a format that cannot drop) leaves the others.
    store.drop(id, ranges);  // a plugin's count is not trusted: the positions say what went
    for (std::size_t h = 0; h < groups.size(); ++h)
      if (h != g && !gone[h].empty()) groups[h].store->drop(id, ranges);
    for (const PositionRange& r : removed) report.dropped.push_back({id, r});
  }
}

std::optional<std::uint64_t> Cache::Impl::shortfall(std::size_t g, std::span<const SeqId> ids,
                                                    std::span<const std::uint32_t> tokens) {
  const CacheStore& store = *groups[g].store;
  std::uint64_t needed = 0, partial = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::uint64_t length = store.length(ids[i]);
    needed +=
        (length + tokens[i] + page_size - 1) / page_size - (length + page_size - 1) / page_size;
    partial += tokens[i] > 0 && length % page_size != 0;
  }
  const StoreStats st = store.stats();
  const std::uint64_t available = st.free_pages + st.cached_pages;
  // Room even if every partial last page were shared and needed a private copy: the pool was not
  // what ran out (host memory did, inside the store), and evicting would not help.
  if (needed + partial <= available) return std::nullopt;
  // The pages new tokens need; a shared last page's private copy is not counted ahead: when the
  // reserve still fails, the next round asks for at least one page more. Counting one per
  // sequence ahead would preempt a sequence too many under every policy.
  return needed > available ? needed - available : 1;
}

void Cache::Impl::after_step(EvictionReport& report) {
  // The tokens a sequence declared (match_prefix, publish_prefix) are published in every group
  // first, so that a window's pages can serve a later prefix from the prefix cache.
  if (frees_pages)
    for (auto& [id, s] : sequences) {
      if (s.tokens.empty()) continue;
      for (Group& g : groups) g.store->publish_prefix(id, s.tokens);
      if (s.next_position >= static_cast<Position>(s.tokens.size())) s.tokens.clear();  // all out
    }
  // A windowed group's pages behind every later query's window (and layers.rollback tokens
  // more) go. This is the mask's own rule, not an eviction: no query could read them again, so
  // nothing is reported.
  for (Group& g : groups) {
    if (!g.info.frees_pages) continue;
    for (const auto& [id, s] : sequences) {
      const std::uint64_t length = g.store->length(id);
      bool written = true;
      for (std::uint32_t l = 0; l < g.info.layers.size() && written; ++l)
        written = g.store->written(id, l) == length;
      if (!written) continue;  // a per-layer caller mid-step: at the next step
      const std::vector<Position> held = g.store->positions(id);
      const std::vector<PositionRange> gone = windows::behind(
          *g.mask, held, std::max<Position>(s.next_position - static_cast<Position>(rollback), 0),
          page_size);
      if (!gone.empty()) g.store->drop_unseen(id, gone);
    }
  }
  ++step;
  if (!policy) return;
  // The policy sees each group, the fullest first: a group's own pages decide (a window that
  // streaming eviction trims is in the global group, a pool that runs full in either).
  std::vector<std::pair<double, std::size_t>> fullest;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const StoreStats st = groups[g].store->stats();
    fullest.push_back(
        {st.total_pages == 0 ? 1.0 : 1.0 - double(st.free_pages) / double(st.total_pages), g});
  }
  std::sort(fullest.begin(), fullest.end(), std::greater<>());
  for (const auto& [used, g] : fullest)
    consult(
        g, [&](const CacheState& s) { return policy->after_step(s); }, report);
}

void Cache::Impl::undo_reserve(std::span<const SeqId> ids, std::span<const std::uint32_t> counts,
                               std::size_t groups_done) noexcept {
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto it = sequences.find(ids[i]);
    if (it == sequences.end() || counts[i] == 0) continue;
    try {
      for (std::size_t g = 0; g < groups_done; ++g) groups[g].store->unreserve(ids[i], counts[i]);
      if (groups_done == groups.size())
        it->second.next_position -= static_cast<Position>(counts[i]);
    } catch (const std::exception& e) {
      it->second.broken = true;
      try {
        it->second.why_broken = e.what();
        spdlog::warn("sequence {} cannot take part in a step again: {}", ids[i], e.what());
      } catch (...) {  // the flag is what matters; the text is a courtesy
      }
    }
  }
}

EvictionReport Cache::Impl::reserve(std::vector<SeqId>& batch, std::vector<std::uint32_t>& counts) {
  EvictionReport report;
  // Every group or none: a group that refuses undoes the groups before it.
  const auto reserve_all = [&]() -> std::optional<Refusal> {
    for (std::size_t g = 0; g < groups.size(); ++g) {
      try {
        groups[g].store->reserve(batch, counts);
      } catch (const Error& e) {
        undo_reserve(batch, counts, g);
        if (e.code() != Code::out_of_memory) throw;
        return Refusal{g, e};
      }
    }
    return std::nullopt;
  };
  try {
    for (;;) {
      const std::optional<Refusal> refused = reserve_all();
      if (!refused) break;
      {
        const auto& [g, e] = *refused;
        const std::optional<std::uint64_t> needed = shortfall(g, batch, counts);
        if (!needed) throw e;
        const std::string what = groups.size() > 1
                                     ? "layer group '" + groups[g].info.name + "': " + e.what()
                                     : std::string(e.what());
        if (!policy) throw CacheFull(what, std::move(report));
        if (!consult(
                g, [&](const CacheState& s) { return policy->on_pressure(s, *needed); }, report))
          throw CacheFull(what + "; the eviction policy freed nothing more", std::move(report));
        // Preempted members of this batch are no longer reserved for.
        for (std::size_t i = batch.size(); i-- > 0;) {
          if (!sequences.contains(batch[i])) {
            batch.erase(batch.begin() + static_cast<std::ptrdiff_t>(i));
            counts.erase(counts.begin() + static_cast<std::ptrdiff_t>(i));
          }
        }
      }
    }
  } catch (const CacheFull&) {
    throw;
  } catch (...) {  // the policy or the store failed: what earlier rounds evicted stands
    rethrow_with(std::move(report));
  }
  for (std::size_t i = 0; i < batch.size(); ++i) info(batch[i]).next_position += counts[i];
  return report;
}

EvictionReport Cache::reserve(std::span<const SeqId> ids, std::span<const std::uint32_t> tokens) {
  std::unique_lock lock(impl_->mutex);
  impl_->wait_for_step(lock, "reserve");
  if (ids.size() != tokens.size())
    throw Error(Code::invalid_argument, "reserve: sequences and token counts differ");
  for (SeqId id : ids) impl_->steppable("reserve", id);
  std::vector<SeqId> batch(ids.begin(), ids.end());
  std::vector<std::uint32_t> counts(tokens.begin(), tokens.end());
  return impl_->reserve(batch, counts);
}

EvictionReport Cache::end_step() {
  std::unique_lock lock(impl_->mutex);
  impl_->wait_for_step(lock, "end_step");
  EvictionReport report;
  try {
    impl_->after_step(report);
  } catch (...) {
    rethrow_with(std::move(report));
  }
  return report;
}

void rethrow_with(EvictionReport report, bool always) {
  if (report.empty() && !always) throw;
  try {
    throw;
  } catch (const EvictionError& e) {
    report.merge(e.report());
    throw EvictionError(e.code(), e.what(), std::move(report));
  } catch (const Error& e) {
    throw EvictionError(e.code(), e.what(), std::move(report));
  } catch (const std::bad_alloc&) {
    throw EvictionError(Code::out_of_memory, "out of host memory", std::move(report));
  } catch (const std::exception& e) {
    throw EvictionError(Code::internal, e.what(), std::move(report));
  }
}

void EvictionReport::merge(const EvictionReport& other) {
  preempted.insert(preempted.end(), other.preempted.begin(), other.preempted.end());
  dropped.insert(dropped.end(), other.dropped.begin(), other.dropped.end());
  cached_pages_freed += other.cached_pages_freed;
}

}  // namespace kvcache
