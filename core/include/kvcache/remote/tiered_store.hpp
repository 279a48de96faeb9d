// The shared tier (docs/remote-tier.md): a CacheStore in front of any store whose prefix cache
// reaches past the process. publish_prefix writes the newly published full pages through to a
// ByteStore (copies staged at once, sent by a background thread); match_prefix, when the local
// prefix ends before the prompt's last full page, probes the following pages' keys, pulls the
// contiguous run of hits within a deadline, verifies each page and imports it, and the local
// match attaches it. A dead, slow, full or lying store costs hit rate, never correctness: any
// failure or mismatch is a miss, counted, and the chain stops there.
//
// Threads: as the store it wraps (the Cache serializes its calls); the transport is called from
// the caller's thread and from the writer at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kvcache/cache_store.hpp"
#include "kvcache/export.hpp"
#include "kvcache/forwarding_store.hpp"
#include "kvcache/remote/byte_store.hpp"
#include "kvcache/remote/page_key.hpp"
#include "kvcache/remote/tier_stats.hpp"

namespace kvcache::remote {

struct TierSettings {
  std::string label = "default";  // the namespace, in every key
  std::string salt;               // the namespace's secret, in the root of every key
  std::string model;              // the model's identity (weights), required
  FormatIdentity formats;
  std::uint64_t queue_bytes = 256ull << 20;  // staged writes at most
  std::uint32_t min_pages = 1;               // ask the store only when this many pages could come
  std::uint32_t batch_pages = 64;            // keys per probe and get
  std::chrono::milliseconds deadline{2000};  // for one prefix's pull
  std::uint32_t breaker_failures = 3;
  std::chrono::milliseconds breaker_open{10000};
};

class KVCACHE_API TieredStore final : public ForwardingStore {
 public:
  // Throws Error(unsupported) when `inner` cannot export and import pages (an older plugin's).
  TieredStore(std::unique_ptr<CacheStore> inner, std::unique_ptr<ByteStore> remote,
              const ModelShape& model, TierSettings settings);
  ~TieredStore() override;
  // Why `store` cannot be under a tier (it cannot copy pages out and in), or nullopt.
  static std::optional<std::string> unsupported(const CacheStore& store, const ModelShape& model);

  // Tokens a prompt would get: the local prefix, then the store's contiguous run of held pages
  // (probed, not pulled). Changes nothing.
  std::uint64_t remote_lookup(std::span<const std::int32_t> token_ids);
  // Waits until the pages staged so far are written (or dropped); false if the deadline passed.
  bool flush(std::chrono::milliseconds deadline);
  TierStats tier_stats() const;
  const ByteStore& transport() const { return *remote_; }

  void publish_prefix(SeqId sequence, std::span<const std::int32_t> token_ids) override;
  std::uint64_t match_prefix(SeqId sequence, std::span<const std::int32_t> token_ids) override;
  void release(SeqId sequence) override;

  struct State;

 private:
  // Pulls pages [from, to) of token_ids while they come, verified, in order; returns how many
  // were imported (or found present).
  std::uint64_t pull(std::span<const std::int32_t> token_ids, std::uint64_t from, std::uint64_t to);

  std::unique_ptr<ByteStore> remote_;
  std::unique_ptr<State> state_;
};

}  // namespace kvcache::remote
