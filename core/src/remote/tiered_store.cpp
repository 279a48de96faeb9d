#include "kvcache/remote/tiered_store.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <optional>
#include <string>

#include <spdlog/spdlog.h>

#include "kvcache/remote/page_wire.hpp"
#include "remote/breaker.hpp"
#include "remote/in_order.hpp"
#include "remote/write_queue.hpp"

namespace kvcache::remote {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kLatencies = 1024;     // lookups kept for the percentiles
constexpr std::size_t kKnownKeys = 1 << 20;  // keys remembered as in the store, at most

KeyChain make_chain(const CacheStore& inner, const ModelShape& model, const TierSettings& s) {
  if (s.remote.model.empty())
    throw Error(Code::invalid_argument,
                "the remote tier needs the model's identity (remote.model), so that only hosts "
                "running the same weights share pages");
  const StoreInfo info = inner.info();
  return KeyChain(s.remote.label, s.salt,
                  model_fingerprint(s.remote.model, model, 0, model.kv_heads),
                  format_fingerprint(s.formats, info), info.page_size);
}

// How many of `keys`, from the first, the store holds: a run stops at the first absent.
std::size_t held_run(ByteStore& store, std::span<const std::string> keys) {
  const std::vector<bool> held = store.probe(keys);
  std::size_t n = 0;
  while (n < keys.size() && n < held.size() && held[n]) ++n;
  return n;
}

}  // namespace

struct TieredStore::State {
  State(const CacheStore& inner, const ModelShape& model, TierSettings s, ByteStore& remote)
      : settings(std::move(s)),
        chain(make_chain(inner, model, settings)),
        image_bytes(page_image_bytes(inner.info(), model)),
        layers(model.layers),
        breaker(settings.remote.breaker_failures,
                std::chrono::milliseconds(settings.remote.breaker_open_ms)),
        queue(remote, breaker, settings.remote.queue_bytes, writes) {}

  TierSettings settings;
  KeyChain chain;
  std::uint64_t image_bytes;
  std::uint32_t layers;
  Breaker breaker;
  WriteCounters writes;
  std::atomic<std::uint64_t> lookups{0}, hits{0}, misses{0}, corrupt{0}, no_room{0}, failures{0},
      skipped{0}, bytes_read{0};
  mutable std::mutex mutex;          // what follows
  std::vector<double> latencies_us;  // a ring of the last kLatencies
  std::size_t next_latency = 0;
  std::unordered_map<SeqId, std::uint64_t> staged;  // pages of a sequence handed to the queue
  std::unordered_set<std::string> known;            // keys written or read: not written again
  WriteQueue queue;                                 // last: its thread stops first

  void record(Clock::time_point start) {
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    std::lock_guard lock(mutex);
    if (latencies_us.size() < kLatencies)
      latencies_us.push_back(us);
    else
      latencies_us[next_latency] = us;
    next_latency = (next_latency + 1) % kLatencies;
  }
  std::vector<std::string> keys(std::span<const Digest> digests, std::uint64_t from,
                                std::uint64_t end) const {
    std::vector<std::string> out;
    for (std::uint64_t i = from; i < end; ++i) out.push_back(chain.key(digests[i]));
    return out;
  }
  // Page i of token_ids as its value must name it.
  PageIdentity page(std::span<const Digest> digests, std::uint64_t i,
                    std::span<const std::int32_t> token_ids) const {
    return {&chain, i, i == 0 ? chain.root() : digests[i - 1], digests[i],
            token_ids.subspan(i * chain.page_size(), chain.page_size())};
  }
  Clock::time_point deadline_from(Clock::time_point start) const {
    return start + std::chrono::milliseconds(settings.remote.deadline_ms);
  }
  void failed(const ByteStore& remote, const std::exception& e) {
    spdlog::debug("remote tier: {} failed: {}", remote.describe(), e.what());
    ++failures;
    breaker.failure();
  }
  void remember(const std::string& key) {
    if (known.size() >= kKnownKeys) known.clear();
    known.insert(key);
  }
};

TieredStore::TieredStore(std::unique_ptr<CacheStore> inner, std::unique_ptr<ByteStore> remote,
                         const ModelShape& model, TierSettings settings)
    : ForwardingStore(std::move(inner)), remote_(std::move(remote)) {
  if (const auto why = unsupported(*inner_, model)) throw Error(Code::unsupported, *why);
  state_ = std::make_unique<State>(*inner_, model, std::move(settings), *remote_);
}

// Asked by exporting page 0 (any pool has one; its bytes are not used): the answer of the store
// itself, not a guess from its version.
std::optional<std::string> TieredStore::unsupported(const CacheStore& store,
                                                    const ModelShape& model) {
  std::vector<std::byte> image(page_image_bytes(store.info(), model));
  try {
    store.export_page(0, image);
  } catch (const Error& e) {
    if (e.code() != Code::unsupported) throw;
    return e.what();
  }
  return std::nullopt;
}

TieredStore::~TieredStore() = default;

void TieredStore::publish_prefix(SeqId sequence, std::span<const std::int32_t> token_ids) {
  inner_->publish_prefix(sequence, token_ids);
  State& st = *state_;
  // The pages the store has just published: full, written in every layer, within token_ids.
  // Held page j is page k of the tokens when it holds positions k * page_size on, in order (a
  // windowed group holds no pages before its window).
  const std::uint32_t page_size = st.chain.page_size();
  std::uint64_t written = inner_->length(sequence);
  for (std::uint32_t layer = 0; layer < st.layers; ++layer)
    written = std::min(written, inner_->written(sequence, layer));
  const std::vector<Position> positions = inner_->positions(sequence);
  const std::uint64_t held = written / page_size;
  const std::uint64_t full =
      held == 0 ? 0
                : std::min<std::uint64_t>(
                      static_cast<std::uint64_t>(positions[held * page_size - 1]) / page_size + 1,
                      token_ids.size() / page_size);
  std::lock_guard lock(st.mutex);
  std::uint64_t& staged = st.staged[sequence];
  if (full <= staged) return;
  const std::vector<Digest> digests = st.chain.digests(token_ids, full);
  const PageTable table = inner_->page_table(std::span<const SeqId>(&sequence, 1));
  std::vector<std::byte> image(st.image_bytes);
  for (std::uint64_t j = 0; j < held; ++j) {
    const Position first = positions[j * page_size];
    const auto i = static_cast<std::uint64_t>(first) / page_size;
    if (i < staged || i >= full || static_cast<std::uint64_t>(first) != i * page_size ||
        positions[(j + 1) * page_size - 1] != first + static_cast<Position>(page_size - 1))
      continue;
    const std::string key = st.chain.key(digests[i]);
    if (st.known.contains(key)) continue;
    inner_->export_page(static_cast<std::uint32_t>(table.indices[j]), image);
    if (st.queue.push(key, encode_page(st.page(digests, i, token_ids), image))) st.remember(key);
  }
  staged = full;
}

std::uint64_t TieredStore::match_prefix(SeqId sequence, std::span<const std::int32_t> token_ids) {
  const std::uint32_t page_size = state_->chain.page_size();
  const std::uint64_t pages = token_ids.size() / page_size;
  const std::uint64_t local = inner_->lookup_prefix(token_ids) / page_size;
  if (pages > local && pages - local >= state_->settings.remote.min_pages) {
    // A sequence of the tier's own holds the local prefix while pages come in, so that making
    // room for them (an import may reclaim the oldest cached page) never takes one of its pages.
    const SeqId pin = inner_->create_sequence();
    try {
      inner_->match_prefix(pin, token_ids);
      pull(token_ids, local, pages);
    } catch (...) {
      inner_->release(pin);
      throw;
    }
    inner_->release(pin);
  }
  return inner_->match_prefix(sequence, token_ids);
}

std::vector<std::uint8_t> TieredStore::prefix_pages(std::span<const std::int32_t> token_ids) const {
  State& st = *state_;
  std::vector<std::uint8_t> held = inner_->prefix_pages(token_ids);
  std::vector<std::uint64_t> absent;
  for (std::uint64_t i = 0; i < held.size(); ++i)
    if (held[i] == 0) absent.push_back(i);
  if (absent.empty() || !st.breaker.allow()) return held;
  const Clock::time_point start = Clock::now();
  const std::vector<Digest> digests = st.chain.digests(token_ids, held.size());
  std::vector<std::string> keys;
  for (const std::uint64_t i : absent) keys.push_back(st.chain.key(digests[i]));
  try {
    const std::vector<bool> there = remote_->probe(keys);
    for (std::size_t j = 0; j < absent.size() && j < there.size(); ++j)
      held[absent[j]] = there[j] ? 1 : 0;
    st.breaker.success();
  } catch (const std::exception& e) {
    st.failed(*remote_, e);
  }
  st.record(start);
  return held;
}

bool TieredStore::attach_prefix(SeqId sequence, std::span<const std::int32_t> token_ids,
                                std::span<const std::uint64_t> pages) {
  // The pages the local cache lacks come in first, run by run; one that does not (absent, late,
  // wrong) makes the attach below a miss.
  const std::vector<std::uint8_t> local = inner_->prefix_pages(token_ids);
  for (std::size_t i = 0; i < pages.size();) {
    if (local[pages[i]] != 0) {
      ++i;
      continue;
    }
    std::size_t end = i + 1;
    while (end < pages.size() && pages[end] == pages[end - 1] + 1 && local[pages[end]] == 0) ++end;
    pull(token_ids, pages[i], pages[end - 1] + 1);
    i = end;
  }
  return inner_->attach_prefix(sequence, token_ids, pages);
}

void TieredStore::release(SeqId sequence) {
  inner_->release(sequence);
  std::lock_guard lock(state_->mutex);
  state_->staged.erase(sequence);
}

void TieredStore::pull(std::span<const std::int32_t> token_ids, std::uint64_t from,
                       std::uint64_t to) {
  State& st = *state_;
  const Clock::time_point start = Clock::now(), deadline = st.deadline_from(start);
  ++st.lookups;
  const std::uint32_t page_size = st.chain.page_size();
  // Each import takes a free page or reclaims the oldest cached one; the pages of this run are
  // the newest, so up to free + cached imports never reclaim one of them.
  const StoreStats room = inner_->stats();
  if (to - from > room.free_pages + room.cached_pages) {
    to = from + room.free_pages + room.cached_pages;
    ++st.no_room;
  }
  const std::vector<Digest> digests = st.chain.digests(token_ids, to);
  std::uint64_t next = from;
  bool more = true;
  while (more && next < to && Clock::now() < deadline) {
    const std::uint64_t end = std::min<std::uint64_t>(to, next + st.settings.remote.batch_pages);
    std::vector<std::string> keys = st.keys(digests, next, end);
    if (!st.breaker.allow()) {
      ++st.skipped;
      break;
    }
    // Each value is verified and imported as the transport hands it over (from its own buffer,
    // while the next one arrives), in the run's order (InOrder); the run stops at the first value
    // missing, wrong or without room.
    const std::uint64_t first = next;
    // A value that failed verification: told and removed after the call, not from inside it.
    struct Wrong {
      std::string key, problem;
      std::uint64_t page;
    };
    std::optional<Wrong> wrong;
    std::exception_ptr local;  // what the local store threw: not the transport's fault
    InOrder run(keys.size(), [&](std::span<const std::byte> value) {
      const std::size_t j = next - first;
      st.bytes_read += value.size();
      const Checked checked = check_page(value, st.page(digests, next, token_ids), st.image_bytes);
      if (!checked.ok()) {
        ++st.corrupt;
        wrong = Wrong{keys[j], checked.problem, next};
        return false;
      }
      try {
        const PageImport imported =
            inner_->import_page(token_ids.first((next + 1) * page_size), checked.payload);
        if (imported == PageImport::no_room) {
          ++st.no_room;
          return false;
        }
        if (imported == PageImport::imported) ++st.hits;
      } catch (...) {
        local = std::current_exception();
        return false;
      }
      std::lock_guard lock(st.mutex);
      st.remember(keys[j]);
      ++next;
      return true;
    });
    try {
      const std::size_t hits = held_run(*remote_, keys);
      more = hits == keys.size();
      keys.resize(hits);
      if (hits > 0 && Clock::now() < deadline)
        remote_->get_each(
            keys, [&](std::size_t j, std::span<const std::byte> value) { run.take(j, value); });
      st.breaker.success();
    } catch (const std::exception& e) {
      if (!local) st.failed(*remote_, e);
      more = false;
    }
    if (local) std::rethrow_exception(local);
    if (next - first < keys.size()) more = false;  // stopped, or the get came back short
    if (wrong) {
      spdlog::warn("remote tier: {} holds a wrong value for page {} ({}): {}; it is removed",
                   remote_->describe(), wrong->page, wrong->key, wrong->problem);
      try {
        remote_->remove(std::span<const std::string>(&wrong->key, 1));
      } catch (const std::exception&) {
        ++st.failures;
      }
    }
  }
  st.misses += to - next;
  st.record(start);
}

std::uint64_t TieredStore::remote_lookup(std::span<const std::int32_t> token_ids) {
  State& st = *state_;
  const std::uint32_t page_size = st.chain.page_size();
  const std::uint64_t pages = token_ids.size() / page_size;
  std::uint64_t next = inner_->lookup_prefix(token_ids) / page_size;
  if (next >= pages || !st.breaker.allow()) return next * page_size;
  const Clock::time_point start = Clock::now(), deadline = st.deadline_from(start);
  const std::vector<Digest> digests = st.chain.digests(token_ids, pages);
  try {
    while (next < pages && Clock::now() < deadline) {
      const std::uint64_t end =
          std::min<std::uint64_t>(pages, next + st.settings.remote.batch_pages);
      const std::vector<std::string> keys = st.keys(digests, next, end);
      const std::size_t hits = held_run(*remote_, keys);
      next += hits;
      if (hits < keys.size()) break;
    }
    st.breaker.success();
  } catch (const std::exception& e) {
    st.failed(*remote_, e);
  }
  st.record(start);
  return next * page_size;
}

bool TieredStore::flush(std::chrono::milliseconds deadline) {
  return state_->queue.flush(deadline);
}

TierStats TieredStore::tier_stats() const {
  const State& st = *state_;
  TierStats s;
  s.lookups = st.lookups;
  s.hit_pages = st.hits;
  s.miss_pages = st.misses;
  s.corrupt = st.corrupt;
  s.no_room = st.no_room;
  s.failures = st.failures + st.writes.failures;
  s.skipped = st.skipped + st.writes.skipped;
  s.queued_pages = st.writes.queued;
  s.written_pages = st.writes.written;
  s.present_pages = st.writes.present;
  s.dropped_writes = st.writes.dropped;
  s.bytes_read = st.bytes_read;
  s.bytes_written = st.writes.bytes;
  std::vector<double> us;
  {
    std::lock_guard lock(st.mutex);
    us = st.latencies_us;
  }
  if (!us.empty()) {
    std::sort(us.begin(), us.end());
    s.lookup_p50_us = us[us.size() / 2];
    s.lookup_p99_us = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  }
  return s;
}

}  // namespace kvcache::remote
