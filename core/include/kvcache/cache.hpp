// The Cache facade: what an inference engine calls. It opens the first available backend of the
// config's preference list, composes its store and attention with the configured formats, mask
// and eviction policy, and reports every eviction: nothing leaves the cache unreported. Any thread
// may call it: calls are serialized, and one step is open at a time (docs/cache.md, "Threads").
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <dlpack/dlpack.h>

#include "kvcache/attention.hpp"
#include "kvcache/cache_store.hpp"
#include "kvcache/config.hpp"
#include "kvcache/eviction.hpp"
#include "kvcache/eviction_report.hpp"
#include "kvcache/export.hpp"
#include "kvcache/host_only.hpp"
#include "kvcache/mask.hpp"
#include "kvcache/registry.hpp"
#include "kvcache/remote/tier_stats.hpp"
#include "kvcache/step.hpp"
#include "kvcache/tensor.hpp"

namespace kvcache {

// The store a config asks for: model, page size, capacity, prefix caching, K and V formats.
KVCACHE_API StoreSpec store_spec(const Config& config);
// The same, with the codec of each format that is not built in made from its registry
// component, so that any store (and page_cost) can run it.
KVCACHE_API StoreSpec store_spec(const Config& config, const Registry& registry);

// A layer group of a cache (config `layers`, docs/configuration.md#layers): layers that share a
// mask, formats and a page table. A uniform cache has one group, "all", of every layer.
struct LayerGroupInfo {
  std::string name;
  std::vector<std::uint32_t> layers;  // the model's layers, ascending
  MaskDescription mask;
  // After each step the group frees a sequence's pages that every later query's window has
  // left behind (a sliding, sink or chunked mask, in a cache of several groups).
  bool frees_pages = false;
};

// Where a model layer is stored: its group, and its index among the group's layers.
struct LayerPlace {
  std::size_t group = 0;
  std::uint32_t layer = 0;
};

class KVCACHE_API Cache {
 public:
  // Throws Error(unavailable) listing why each preferred backend cannot be used.
  static std::unique_ptr<Cache> open(const Config& config,
                                     std::shared_ptr<const Registry> registry);
  // The config, the process environment (KVCACHE_*) and the plugins it names, in one call:
  // `path_or_yaml` is a config file, a YAML text (one holding a ':' or a line break), or empty
  // for the embedded default. Throws ConfigError for a bad config, with file:line:column.
  static std::unique_ptr<Cache> open(std::string_view path_or_yaml = {});
  ~Cache();
  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;

  const std::string& backend() const;
  const ModelShape& model() const;
  // The store, read-only: stats, page tables, positions, gather. Its sequences change through
  // the Cache alone, which keeps the policy's bookkeeping in step. A cache of several layer
  // groups has one store per group: store() then throws Error(invalid_argument), and
  // group_store(place(layer).group) is the store of a layer, under the Cache's sequence ids.
  const CacheStore& store() const;
  const std::vector<LayerGroupInfo>& groups() const;
  const CacheStore& group_store(std::size_t group) const;
  LayerPlace place(std::uint32_t layer) const;
  // Every group's pages together (the sums of their stats).
  StoreStats stats() const;
  std::vector<SeqId> sequences() const;

  SeqId add_sequence(std::int32_t priority = 50);
  void release(SeqId sequence);
  SeqId fork(SeqId parent);
  // Rolls `sequence` back to its first `tokens` tokens (rejected draft tokens, a beam's or a
  // conversation's rollback): what CacheStore::truncate says, and the next step's tokens take the
  // positions of those given back. Refused for a member of the open step. All or nothing: past
  // the length Error(invalid_argument), a state that cannot be given back Error(unsupported).
  void truncate(SeqId sequence, std::uint64_t tokens);

  // Prefix cache: attach to an empty sequence the longest cached run of full pages for
  // token_ids (returns the tokens reused, already written for every layer); offer a sequence's
  // full pages for reuse once written.
  std::uint64_t match_prefix(SeqId sequence, std::span<const std::int32_t> token_ids);
  void publish_prefix(SeqId sequence, std::span<const std::int32_t> token_ids);
  // Tokens of token_ids that match_prefix would reuse now: the local prefix, then, with a shared
  // tier (a `remote:` section, docs/remote-tier.md), the pages its store holds. Changes nothing.
  std::uint64_t lookup_prefix(std::span<const std::int32_t> token_ids);
  // Waits until the pages published so far are in the shared store (or dropped, counted); false
  // if the deadline passed first. True without a tier.
  bool flush_remote(std::chrono::milliseconds deadline = std::chrono::seconds(10));
  // The remote tier's counters; nullopt without a tier.
  std::optional<remote::TierStats> remote_stats() const;

  // One engine step: reserves new_tokens[i] tokens for sequences[i] and plans attention once
  // for every layer (see kvcache/step.hpp). Throws CacheFull when the tokens do not fit even
  // after eviction (what was evicted is in its report); nothing is reserved then.
  [[nodiscard]] Step begin_step(std::span<const SeqId> sequences,
                                std::span<const std::uint32_t> new_tokens,
                                const StepOptions& options = {});
  [[nodiscard]] Step begin_step(SeqId sequence, std::uint32_t new_tokens = 1);

  // The per-layer calls. Each decode or prefill is a step of one layer, planned for that call (a
  // Step plans once for all layers); it attends over every reserved slot, so a layer's reserved
  // tokens are all appended before its attention.
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
  // counts[i] queries per sequence: its newest counts[i] reserved tokens.
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
