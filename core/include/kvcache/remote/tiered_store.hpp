// The remote tier (docs/remote-tier.md): a CacheStore in front of any store whose prefix cache
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
#include "kvcache/config.hpp"
#include "kvcache/export.hpp"
#include "kvcache/forwarding_store.hpp"
#include "kvcache/host_only.hpp"
#include "kvcache/remote/byte_store.hpp"
#include "kvcache/remote/page_key.hpp"
#include "kvcache/remote/tier_stats.hpp"

namespace kvcache::remote {

// The config's `remote:` section (namespace label, the model's identity, queue, read and breaker
// limits) and what it resolves to here: the salt its variable holds, the formats of the store.
struct TierSettings {
  RemoteSettings remote;
  std::string salt;  // the namespace's secret, in the root of every key
  FormatIdentity formats;
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

  void publish_prefix(SeqId sequence, std::span<const std::int32_t> token_ids) override;
  std::uint64_t match_prefix(SeqId sequence, std::span<const std::int32_t> token_ids) override;
  // A windowed layer group's prefix (docs/cache.md): the pages the local cache or the shared
  // store holds (probed), and an attach that pulls the listed pages the local cache lacks.
  std::vector<std::uint8_t> prefix_pages(std::span<const std::int32_t> token_ids) const override;
  bool attach_prefix(SeqId sequence, std::span<const std::int32_t> token_ids,
                     std::span<const std::uint64_t> pages) override;
  void release(SeqId sequence) override;

  struct State;

 private:
  // Pulls pages [from, to) of token_ids while they come, verified, in order, importing each.
  void pull(std::span<const std::int32_t> token_ids, std::uint64_t from, std::uint64_t to);

  std::unique_ptr<ByteStore> remote_;
  std::unique_ptr<State> state_;
};

}  // namespace kvcache::remote
