#include "kvcache/cache.hpp"

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <map>
#include <unordered_map>
#include <utility>

#include <spdlog/spdlog.h>

#include "cache/cache_impl.hpp"
#include "kvcache/formats.hpp"

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

}  // namespace

template <class Decide>
EvictionReport Cache::Impl::consult(Decide&& decide) {
  std::vector<SequenceState> states;
  const StoreStats st = store->stats();
  for (const auto& [id, s] : sequences) {
    const std::uint64_t tokens = store->length(id);
    states.push_back({id, tokens, (tokens + page_size - 1) / page_size, s.priority, s.created_step,
                      s.last_used_step, s.next_position});
  }
  const StoreTokens tokens(*store);
  const CacheState state{page_size,       step,   st.total_pages, st.free_pages,
                         st.cached_pages, states, &tokens};
  return apply(decide(state));
}

EvictionReport Cache::Impl::apply(const EvictionPlan& plan) {
  EvictionReport report;
  try {
    if (plan.free_cached_pages > 0)
      report.cached_pages_freed = store->evict_cached(plan.free_cached_pages);
    for (SeqId id : plan.preempt) {
      if (!sequences.contains(id)) continue;
      store->release(id);
      sequences.erase(id);
      report.preempted.push_back(id);
    }
    std::map<SeqId, std::vector<PositionRange>> drops;
    for (const DroppedRange& d : plan.drop)
      if (sequences.contains(d.sequence)) drops[d.sequence].push_back(d.range);
    for (const auto& [id, ranges] : drops) {
      const std::vector<Position> before = store->positions(id);
      store->drop(id, ranges);
      const std::vector<Position> after = store->positions(id);
      std::vector<Position> gone;
      std::set_difference(before.begin(), before.end(), after.begin(), after.end(),
                          std::back_inserter(gone));
      for (const PositionRange& r : ranges_of(gone)) report.dropped.push_back({id, r});
    }
  } catch (const EvictionError&) {
    throw;
  } catch (const Error& e) {
    throw EvictionError(e.code(), std::string("applying the eviction plan: ") + e.what(),
                        std::move(report));
  }
  return report;
}

std::uint64_t Cache::Impl::shortfall(std::span<const SeqId> ids,
                                     std::span<const std::uint32_t> tokens) {
  std::uint64_t needed = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::uint64_t length = store->length(ids[i]);
    needed +=
        (length + tokens[i] + page_size - 1) / page_size - (length + page_size - 1) / page_size;
  }
  // The pages new tokens need; a shared last page's private copy is not counted ahead: when the
  // reserve still fails, the next round asks for at least one page more. Counting one per
  // sequence ahead would preempt a sequence too many under every policy.
  const StoreStats st = store->stats();
  const std::uint64_t available = st.free_pages + st.cached_pages;
  return needed > available ? needed - available : 1;
}

Cache::Impl::Visible Cache::Impl::visible_for(std::span<const SeqId> ids,
                                              std::span<const std::uint32_t> counts) {
  std::vector<Position> queries;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    SequenceInfo& s = info(ids[i]);
    s.last_used_step = step;
    const std::uint32_t n = counts.empty() ? 1 : counts[i];
    for (std::uint32_t j = 0; j < n; ++j) queries.push_back(s.next_position - n + j);
  }
  Visible v;
  v.max_ranges = mask->describe().max_ranges;
  v.ranges.assign(queries.size() * v.max_ranges, {});
  v.counts.assign(queries.size(), 0);
  mask->visible(queries, v.ranges, v.counts);
  return v;
}

EvictionReport Cache::Impl::after_step() {
  ++step;
  if (!policy) return {};
  return consult([&](const CacheState& s) { return policy->after_step(s); });
}

void Cache::Impl::attend(std::uint32_t layer, std::span<const SeqId> ids,
                         std::span<const std::uint32_t> counts, const DLTensor& q, DLTensor& out) {
  const Visible visible = visible_for(ids, counts);
  AttentionRequest request;
  request.layer = layer;
  request.sequences = ids;
  request.query_counts = counts;
  request.q = &q;
  request.out = &out;
  request.visible = visible.view();
  request.accumulate_scores = wants_scores();
  counts.empty() ? attention->decode(*store, request) : attention->prefill(*store, request);
}

void EvictionReport::merge(const EvictionReport& other) {
  preempted.insert(preempted.end(), other.preempted.begin(), other.preempted.end());
  dropped.insert(dropped.end(), other.dropped.begin(), other.dropped.end());
  cached_pages_freed += other.cached_pages_freed;
}

Cache::Cache(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Cache::~Cache() = default;

StoreSpec store_spec(const Config& config) {
  StoreSpec spec;
  spec.model = config.model;
  spec.page_size = config.cache.page_size;
  spec.capacity_bytes = config.cache.capacity_bytes;
  spec.prefix_caching = config.cache.prefix_caching;
  spec.k_format = config.k_quantizer.name;
  spec.k_options = config.k_quantizer.options;
  spec.v_format = config.v_quantizer.name;
  spec.v_options = config.v_quantizer.options;
  return spec;
}

StoreSpec store_spec(const Config& config, const Registry& registry) {
  return with_codecs(store_spec(config), registry);
}

std::unique_ptr<Cache> Cache::open(const Config& config, std::shared_ptr<const Registry> registry) {
  auto impl = std::make_unique<Impl>();
  impl->registry = registry;
  std::string why;
  const ComponentChoice* backend = nullptr;  // the chosen entry, created with its options below
  for (const ComponentChoice& entry : config.backends) {
    const ComponentInfo* info = registry->find(ComponentKind::backend, entry.name);
    if (info != nullptr && info->available) {
      backend = &entry;
      impl->backend_name = entry.name;
      break;
    }
    why += (why.empty() ? "" : "; ") + entry.name + ": " +
           (info == nullptr ? std::string("not installed") : info->unavailable_reason);
  }
  if (backend == nullptr)
    throw Error(Code::unavailable,
                "no backend of the preference list is available here (" + why + ")");
  if (!why.empty()) spdlog::info("backend {} chosen; before it: {}", impl->backend_name, why);

  // The policy first: a conflict with the formats is refused before any memory is taken.
  if (config.eviction.name != "none") {
    impl->policy = registry->create_eviction(config.eviction.name, config.eviction.options);
    if (const auto drops = token_drop_check(config, *registry, *impl->policy)) {
      if (drops->severity == Diagnostic::Severity::error)
        throw Error(Code::invalid_argument, drops->message);
      spdlog::warn("{}", drops->message);
    }
  }
  // A format the chosen backend cannot run is refused before any memory is taken.
  const ComponentInfo& chosen = *registry->find(ComponentKind::backend, impl->backend_name);
  if (const std::vector<Diagnostic> refused = format_refusals(config, chosen); !refused.empty())
    throw Error(Code::unsupported, refused.front().key + ": " + refused.front().message);
  const StoreSpec spec = store_spec(config, *registry);
  impl->model = config.model;
  impl->page_size = config.cache.page_size;
  impl->backend = registry->create_backend(backend->name, backend->options);
  impl->store = impl->backend->create_store(spec);
  impl->attention = impl->backend->create_attention();
  impl->mask = registry->create_mask(config.mask.name, config.mask.options);
  return std::unique_ptr<Cache>(new Cache(std::move(impl)));
}

std::unique_ptr<Cache> Cache::open(std::string_view path_or_yaml) {
  const Config config = read_config(path_or_yaml, process_environment());
  return open(config, Registry::load(config.plugins));
}

const std::string& Cache::backend() const {
  return impl_->backend_name;
}
const ModelShape& Cache::model() const {
  return impl_->model;
}
const CacheStore& Cache::store() const {
  return *impl_->store;
}
StoreStats Cache::stats() const {
  return impl_->store->stats();
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
  const SeqId id = impl_->store->create_sequence();
  impl_->sequences[id] = {priority, impl_->step, impl_->step, 0};
  return id;
}

void Cache::release(SeqId id) {
  const std::lock_guard lock(impl_->mutex);
  impl_->refuse_for_step_member("release", id);
  impl_->info(id);
  impl_->store->release(id);
  impl_->sequences.erase(id);
}

SeqId Cache::fork(SeqId parent) {
  const std::lock_guard lock(impl_->mutex);
  impl_->refuse_for_step_member("fork", parent);
  const SequenceInfo s = impl_->info(parent);
  const SeqId id = impl_->store->fork(parent);
  impl_->sequences[id] = {s.priority, impl_->step, impl_->step, s.next_position};
  return id;
}

std::uint64_t Cache::match_prefix(SeqId id, std::span<const std::int32_t> token_ids) {
  const std::lock_guard lock(impl_->mutex);
  impl_->refuse_for_step_member("match_prefix", id);
  SequenceInfo& s = impl_->info(id);
  const std::uint64_t matched = impl_->store->match_prefix(id, token_ids);
  s.next_position = static_cast<Position>(matched);
  s.last_used_step = impl_->step;
  return matched;
}

void Cache::publish_prefix(SeqId id, std::span<const std::int32_t> token_ids) {
  const std::lock_guard lock(impl_->mutex);
  impl_->info(id);
  impl_->store->publish_prefix(id, token_ids);
}

EvictionReport Cache::Impl::reserve(std::vector<SeqId>& batch, std::vector<std::uint32_t>& counts) {
  EvictionReport report;
  for (;;) {
    try {
      store->reserve(batch, counts);
      break;
    } catch (const Error& e) {
      if (e.code() != Code::out_of_memory) throw;
      if (!policy) throw CacheFull(e.what(), report);
      const std::uint64_t needed = shortfall(batch, counts);
      EvictionReport step_report;
      try {
        step_report = consult([&](const CacheState& s) { return policy->on_pressure(s, needed); });
      } catch (const EvictionError& partial) {  // keep what earlier rounds evicted, too
        report.merge(partial.report());
        throw EvictionError(partial.code(), partial.what(), std::move(report));
      }
      if (step_report.empty())
        throw CacheFull(std::string(e.what()) + "; the eviction policy freed nothing more", report);
      report.merge(step_report);
      // Preempted members of this batch are no longer reserved for.
      for (std::size_t i = batch.size(); i-- > 0;) {
        if (!sequences.contains(batch[i])) {
          batch.erase(batch.begin() + static_cast<std::ptrdiff_t>(i));
          counts.erase(counts.begin() + static_cast<std::ptrdiff_t>(i));
        }
      }
    }
  }
  for (std::size_t i = 0; i < batch.size(); ++i) info(batch[i]).next_position += counts[i];
  return report;
}

EvictionReport Cache::reserve(std::span<const SeqId> ids, std::span<const std::uint32_t> tokens) {
  std::unique_lock lock(impl_->mutex);
  impl_->wait_for_step(lock, "reserve");
  if (ids.size() != tokens.size())
    throw Error(Code::invalid_argument, "reserve: sequences and token counts differ");
  for (SeqId id : ids) impl_->info(id);
  std::vector<SeqId> batch(ids.begin(), ids.end());
  std::vector<std::uint32_t> counts(tokens.begin(), tokens.end());
  return impl_->reserve(batch, counts);
}

void Cache::append(std::uint32_t layer, std::span<const SeqId> ids,
                   std::span<const std::uint32_t> counts, const DLTensor& k, const DLTensor& v) {
  std::unique_lock lock(impl_->mutex);
  impl_->wait_for_step(lock, "append");
  impl_->store->append(layer, ids, counts, k, v);
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

EvictionReport Cache::end_step() {
  std::unique_lock lock(impl_->mutex);
  impl_->wait_for_step(lock, "end_step");
  return impl_->after_step();
}

}  // namespace kvcache
