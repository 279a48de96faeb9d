#include "kvcache/cache.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <map>
#include <new>
#include <unordered_map>
#include <utility>

#include <spdlog/spdlog.h>

#include "cache/cache_impl.hpp"
#include "kvcache/formats.hpp"
#include "kvcache/remote/transports.hpp"

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
bool Cache::Impl::consult(Decide&& decide, EvictionReport& report) {
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
  const EvictionPlan plan = decide(state);
  const std::size_t preempted = report.preempted.size(), dropped = report.dropped.size();
  const std::uint64_t freed = report.cached_pages_freed;
  apply(plan, report);
  return report.preempted.size() != preempted || report.dropped.size() != dropped ||
         report.cached_pages_freed != freed;
}

void Cache::Impl::apply(const EvictionPlan& plan, EvictionReport& report) {
  // Room in the report first: once the store has removed something, recording it must not fail.
  report.preempted.reserve(report.preempted.size() + plan.preempt.size());
  if (plan.free_cached_pages > 0)
    report.cached_pages_freed += store->evict_cached(plan.free_cached_pages);
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
    // What the drop removes: the held positions within the ranges, known before it happens.
    std::vector<Position> gone = store->positions(id);
    std::erase_if(gone, [&](Position p) {
      return std::none_of(ranges.begin(), ranges.end(),
                          [&](const PositionRange& r) { return p >= r.begin && p < r.end; });
    });
    const std::vector<PositionRange> removed = ranges_of(gone);
    report.dropped.reserve(report.dropped.size() + removed.size());
    const std::uint64_t count = store->drop(id, ranges);
    for (const PositionRange& r : removed) report.dropped.push_back({id, r});
    (void)count;  // a plugin's count is not trusted: the positions say what went
  }
}

std::optional<std::uint64_t> Cache::Impl::shortfall(std::span<const SeqId> ids,
                                                    std::span<const std::uint32_t> tokens) {
  std::uint64_t needed = 0, partial = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::uint64_t length = store->length(ids[i]);
    needed +=
        (length + tokens[i] + page_size - 1) / page_size - (length + page_size - 1) / page_size;
    partial += tokens[i] > 0 && length % page_size != 0;
  }
  const StoreStats st = store->stats();
  const std::uint64_t available = st.free_pages + st.cached_pages;
  // Room even if every partial last page were shared and needed a private copy: the pool was not
  // what ran out (host memory did, inside the store), and evicting would not help.
  if (needed + partial <= available) return std::nullopt;
  // The pages new tokens need; a shared last page's private copy is not counted ahead: when the
  // reserve still fails, the next round asks for at least one page more. Counting one per
  // sequence ahead would preempt a sequence too many under every policy.
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
  if (mask->describe().positions_in_cache) {
    std::vector<Position> at(v.ranges.size(), 0);
    mask->query_positions(queries, v.ranges, v.counts, at);
    v.rotations = rotation_table(rope, rope_frequencies, queries, v.counts, v.max_ranges, at);
  }
  return v;
}

void Cache::Impl::undo_reserve(std::span<const SeqId> ids,
                               std::span<const std::uint32_t> counts) noexcept {
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto it = sequences.find(ids[i]);
    if (it == sequences.end() || counts[i] == 0) continue;
    try {
      store->unreserve(ids[i], counts[i]);
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

void Cache::Impl::after_step(EvictionReport& report) {
  ++step;
  if (policy) consult([&](const CacheState& s) { return policy->after_step(s); }, report);
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
  counts.empty() ? attention->decode(*kv, request) : attention->prefill(*kv, request);
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

namespace {

// Puts the shared tier in front of the store. A store that cannot copy pages (a plugin before
// ABI 1.7) keeps working without it, saying so.
void attach_tier(Cache::Impl& impl, const RemoteSettings& remote, const Config& config) {
  remote::TierSettings settings{remote, {}, {}};
  if (!remote.salt_env.empty()) {
    const char* salt = std::getenv(remote.salt_env.c_str());
    if (salt == nullptr)
      throw Error(Code::invalid_argument,
                  "remote.namespace.salt_env names " + remote.salt_env + ", which is not set");
    settings.salt = salt;
  }
  settings.formats = {config.k_quantizer.name, config.k_quantizer.options, config.v_quantizer.name,
                      config.v_quantizer.options};
  std::unique_ptr<remote::ByteStore> transport = remote::make_transport(remote, *impl.registry);
  if (const auto why = remote::TieredStore::unsupported(*impl.store, config.model)) {
    spdlog::warn("shared tier off: backend {}: {}", impl.backend_name, *why);
    return;
  }
  const std::string where = transport->describe();
  auto tier = std::make_unique<remote::TieredStore>(std::move(impl.store), std::move(transport),
                                                    config.model, std::move(settings));
  impl.tier = tier.get();
  impl.kv = &tier->inner();
  impl.store = std::move(tier);
  spdlog::info("shared tier: {} (namespace {})", where, remote.label);
}

}  // namespace

std::unique_ptr<Cache> Cache::open(const Config& config, std::shared_ptr<const Registry> registry) {
  if (!config.layer_groups.empty()) {
    std::string groups;
    for (const LayerGroup& group : config.layer_groups)
      groups += (groups.empty() ? "" : ", ") + group.name;
    throw Error(Code::unsupported,
                "layers: a cache of several layer groups (" + groups +
                    ") is not built yet; `kvcache config check` and `kvcache plan` read them, "
                    "Cache::open takes one mask and one pair of formats for every layer");
  }
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
  // So is a mask that places queries where the model's RoPE or the backend cannot.
  impl->mask = registry->create_mask(config.mask.name, config.mask.options);
  if (const auto positions = position_check(config, chosen, *impl->mask))
    throw Error(Code::unsupported, positions->message);
  if (impl->mask->describe().positions_in_cache) {
    impl->rope = *config.rope;
    impl->rope_frequencies = rope_frequencies(*config.rope, config.model.head_dim);
  }
  const StoreSpec spec = store_spec(config, *registry);
  impl->model = config.model;
  impl->page_size = config.cache.page_size;
  impl->backend = registry->create_backend(backend->name, backend->options);
  impl->store = impl->backend->create_store(spec);
  impl->kv = impl->store.get();
  if (config.remote) attach_tier(*impl, *config.remote, config);
  impl->attention = impl->backend->create_attention();
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
  SequenceInfo& s = impl_->track(id);
  s.priority = priority;
  s.created_step = s.last_used_step = impl_->step;
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
  SequenceInfo& child = impl_->track(id);
  child.priority = s.priority;
  child.created_step = child.last_used_step = impl_->step;
  child.next_position = s.next_position;
  return id;
}

void Cache::truncate(SeqId id, std::uint64_t tokens) {
  const std::lock_guard lock(impl_->mutex);
  impl_->refuse_for_step_member("truncate", id);
  SequenceInfo& s = impl_->info(id);
  const std::uint64_t held = impl_->store->length(id);
  if (tokens > held)
    throw Error(Code::invalid_argument, "truncate: sequence " + std::to_string(id) + " holds " +
                                            std::to_string(held) + " tokens, cannot keep " +
                                            std::to_string(tokens));
  if (tokens == held) return;
  const Position next = impl_->store->positions(id)[tokens];
  impl_->store->truncate(id, tokens);
  s.next_position = next;
  s.last_used_step = impl_->step;
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
  impl_->refuse_for_step_member("publish_prefix", id);
  impl_->info(id);
  impl_->store->publish_prefix(id, token_ids);
}

std::uint64_t Cache::lookup_prefix(std::span<const std::int32_t> token_ids) {
  const std::lock_guard lock(impl_->mutex);
  return impl_->tier != nullptr ? impl_->tier->remote_lookup(token_ids)
                                : impl_->store->lookup_prefix(token_ids);
}

bool Cache::flush_remote(std::chrono::milliseconds deadline) {
  // Not under the Cache's lock: the writer needs none, and steps may go on meanwhile.
  return impl_->tier == nullptr || impl_->tier->flush(deadline);
}

std::optional<remote::TierStats> Cache::remote_stats() const {
  if (impl_->tier == nullptr) return std::nullopt;
  return impl_->tier->tier_stats();
}

EvictionReport Cache::Impl::reserve(std::vector<SeqId>& batch, std::vector<std::uint32_t>& counts) {
  EvictionReport report;
  try {
    for (;;) {
      try {
        store->reserve(batch, counts);
        break;
      } catch (const Error& e) {
        if (e.code() != Code::out_of_memory) throw;
        const std::optional<std::uint64_t> needed = shortfall(batch, counts);
        if (!needed) throw;
        if (!policy) throw CacheFull(e.what(), std::move(report));
        if (!consult([&](const CacheState& s) { return policy->on_pressure(s, *needed); }, report))
          throw CacheFull(std::string(e.what()) + "; the eviction policy freed nothing more",
                          std::move(report));
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
  EvictionReport report;
  try {
    impl_->after_step(report);
  } catch (...) {
    rethrow_with(std::move(report));
  }
  return report;
}

}  // namespace kvcache
