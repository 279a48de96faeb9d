// The Cache facade's reads and its per-layer calls (steps of one layer); open.cpp composes it,
// sequences.cpp and eviction_driver.cpp change its sequences, step.cpp runs its steps.
#include "kvcache/cache.hpp"

#include <algorithm>

#include "cache/cache_impl.hpp"

namespace kvcache {

Cache::Cache(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Cache::~Cache() = default;

const std::string& Cache::backend() const {
  return impl_->backend_name;
}
const ModelShape& Cache::model() const {
  return impl_->model;
}
const CacheStore& Cache::store() const {
  if (impl_->groups.size() > 1)
    throw Error(Code::invalid_argument,
                "store(): this cache keeps " + std::to_string(impl_->groups.size()) +
                    " layer groups, one store each: use group_store(place(layer).group)");
  return *impl_->groups.front().store;
}
const std::vector<LayerGroupInfo>& Cache::groups() const {
  return impl_->infos;
}
const CacheStore& Cache::group_store(std::size_t group) const {
  if (group >= impl_->groups.size())
    throw Error(Code::invalid_argument, "group_store: group " + std::to_string(group) +
                                            " out of range (the cache has " +
                                            std::to_string(impl_->groups.size()) + ")");
  return *impl_->groups[group].store;
}
LayerPlace Cache::place(std::uint32_t layer) const {
  return impl_->place(layer);
}

StoreStats Cache::stats() const {
  if (impl_->groups.size() == 1) return impl_->groups.front().store->stats();
  StoreStats sum;
  for (const Impl::Group& g : impl_->groups) {
    const StoreStats s = g.store->stats();
    sum.total_pages += s.total_pages;
    sum.used_pages += s.used_pages;
    sum.cached_pages += s.cached_pages;
    sum.free_pages += s.free_pages;
    sum.sequences = std::max(sum.sequences, s.sequences);
    sum.occupied_slots += s.occupied_slots;
    sum.unused_slots += s.unused_slots;
    sum.used_bytes_sum += s.used_bytes();
    sum.total_bytes_sum += s.total_bytes();
  }
  return sum;
}

Cache::Impl::Visible Cache::Impl::visible_for(const Group& group, std::span<const SeqId> ids,
                                              std::span<const std::uint32_t> counts) const {
  std::vector<Position> queries;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const SequenceInfo& s = sequences.at(ids[i]);
    const std::uint32_t n = counts.empty() ? 1 : counts[i];
    for (std::uint32_t j = 0; j < n; ++j) queries.push_back(s.next_position - n + j);
  }
  Visible v;
  const AttentionMask& mask = *group.mask;
  v.max_ranges = group.info.mask.max_ranges;
  v.ranges.assign(queries.size() * v.max_ranges, {});
  v.counts.assign(queries.size(), 0);
  mask.visible(queries, v.ranges, v.counts);
  if (group.info.mask.positions_in_cache) {
    std::vector<Position> at(v.ranges.size(), 0);
    mask.query_positions(queries, v.ranges, v.counts, at);
    v.rotations =
        rotation_table(group.rope, group.rope_frequencies, queries, v.counts, v.max_ranges, at);
  }
  return v;
}

std::unique_ptr<StepPlan> Cache::Impl::plan_group(const Group& group, std::span<const SeqId> ids,
                                                  std::span<const SeqId> own,
                                                  std::span<const std::uint32_t> counts,
                                                  std::optional<EngineStream> stream) const {
  const Visible visible = visible_for(group, ids, counts);
  StepRequest request;
  request.sequences = own;
  request.query_counts = counts;
  request.visible = visible.view();
  request.accumulate_scores = wants_scores();
  request.stream = stream;
  return group.attention->plan(*group.kv, request);
}

void Cache::Impl::attend(std::uint32_t layer, std::span<const SeqId> ids,
                         std::span<const std::uint32_t> counts, const DLTensor& q, DLTensor& out) {
  const LayerPlace& at = place(layer);
  Group& group = groups[at.group];
  for (const SeqId id : ids) info(id);
  mark_used(ids);
  // A step of one layer: the one path every attention takes.
  const std::unique_ptr<StepPlan> plan = plan_group(group, ids, group.own(ids), counts);
  group.attention->run(*group.kv, *plan, at.layer, q, out);
}

void Cache::append(std::uint32_t layer, std::span<const SeqId> ids,
                   std::span<const std::uint32_t> counts, const DLTensor& k, const DLTensor& v) {
  std::unique_lock lock(impl_->mutex);
  impl_->wait_for_step(lock, "append");
  const LayerPlace& at = impl_->place(layer);
  impl_->groups[at.group].store->append(at.layer, ids, counts, k, v);
}

void Cache::decode(std::uint32_t layer, std::span<const SeqId> ids, const DLTensor& q,
                   DLTensor& out) {
  std::unique_lock lock(impl_->mutex);
  impl_->wait_for_step(lock, "decode");
  impl_->attend(layer, ids, {}, q, out);
}

void Cache::prefill(std::uint32_t layer, std::span<const SeqId> ids,
                    std::span<const std::uint32_t> counts, const DLTensor& q, DLTensor& out) {
  std::unique_lock lock(impl_->mutex);
  impl_->wait_for_step(lock, "prefill");
  if (counts.size() != ids.size())
    throw Error(Code::invalid_argument, "prefill: one query count per sequence");
  impl_->attend(layer, ids, counts, q, out);
}

}  // namespace kvcache
