// The Cache facade: what an inference engine calls. It opens the first available backend of the
// config's preference list, composes its store and attention with the configured formats, mask
// and eviction policy, and reports every eviction: nothing leaves the cache unreported.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <dlpack/dlpack.h>

#include "kvcache/attention.hpp"
#include "kvcache/cache_store.hpp"
#include "kvcache/config.hpp"
#include "kvcache/eviction.hpp"
#include "kvcache/export.hpp"
#include "kvcache/registry.hpp"

namespace kvcache {

// What left the cache, so the engine can recompute it.
struct EvictionReport {
  std::vector<SeqId> preempted;       // whole sequences, released
  std::vector<DroppedRange> dropped;  // exactly the positions removed from live sequences
  std::uint64_t cached_pages_freed = 0;
  bool empty() const { return preempted.empty() && dropped.empty() && cached_pages_freed == 0; }
  KVCACHE_API void merge(const EvictionReport& other);
};

// An operation that failed after evicting something: what was evicted on the way is in
// report(); it happened and must be acted on.
class KVCACHE_API EvictionError : public Error {
 public:
  EvictionError(Code code, const std::string& message, EvictionReport report)
      : Error(code, message), report_(std::move(report)) {}
  const EvictionReport& report() const { return report_; }

 private:
  EvictionReport report_;
};

// A reserve that could not be met even after eviction.
class KVCACHE_API CacheFull : public EvictionError {
 public:
  CacheFull(const std::string& message, EvictionReport report)
      : EvictionError(Code::out_of_memory, message, std::move(report)) {}
};

// The store a config asks for: model, page size, capacity, prefix caching, K and V formats.
KVCACHE_API StoreSpec store_spec(const Config& config);
// The same, with the codec of each format that is not built in made from its registry
// component, so that any store (and page_cost) can run it.
KVCACHE_API StoreSpec store_spec(const Config& config, const Registry& registry);

class KVCACHE_API Cache {
 public:
  // Throws Error(unavailable) listing why each preferred backend cannot be used.
  static std::unique_ptr<Cache> open(const Config& config,
                                     std::shared_ptr<const Registry> registry);
  ~Cache();
  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;

  const std::string& backend() const;
  const ModelShape& model() const;
  CacheStore& store();
  StoreStats stats() const;
  std::vector<SeqId> sequences() const;

  SeqId add_sequence(std::int32_t priority = 50);
  void release(SeqId sequence);
  SeqId fork(SeqId parent);

  // Prefix cache: attach to an empty sequence the longest cached run of full pages for
  // token_ids (returns the tokens reused, already written for every layer); offer a sequence's
  // full pages for reuse once written.
  std::uint64_t match_prefix(SeqId sequence, std::span<const std::int32_t> token_ids);
  void publish_prefix(SeqId sequence, std::span<const std::int32_t> token_ids);

  // Room for tokens[i] more tokens in sequences[i]. When memory is short the eviction policy
  // chooses what goes, which may include sequences of this batch (then reported and skipped).
  // Throws CacheFull when it still does not fit.
  EvictionReport reserve(std::span<const SeqId> sequences, std::span<const std::uint32_t> tokens);
  // K and V of one layer for the tokens just reserved: [sum(counts), kv_heads, head_dim].
  void append(std::uint32_t layer, std::span<const SeqId> sequences,
              std::span<const std::uint32_t> counts, const DLTensor& k, const DLTensor& v);
  // One query per sequence at its newest token, under the configured mask.
  void decode(std::uint32_t layer, std::span<const SeqId> sequences, const DLTensor& q,
              DLTensor& out);
  // counts[i] queries per sequence: its newest counts[i] tokens.
  void prefill(std::uint32_t layer, std::span<const SeqId> sequences,
               std::span<const std::uint32_t> counts, const DLTensor& q, DLTensor& out);
  // After each model step: the policy's proactive hook (StreamingLLM windows, H2O budgets).
  // A plan that fails part way (e.g. a drop the store refuses) throws EvictionError with what
  // was done.
  EvictionReport end_step();

  struct Impl;

 private:
  explicit Cache(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvcache
