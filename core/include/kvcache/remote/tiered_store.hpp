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

class KVCACHE_API TieredStore final : public CacheStore {
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
  CacheStore& inner() { return *inner_; }

  void publish_prefix(SeqId sequence, std::span<const std::int32_t> token_ids) override;
  std::uint64_t match_prefix(SeqId sequence, std::span<const std::int32_t> token_ids) override;
  void release(SeqId sequence) override;

  StoreInfo info() const override { return inner_->info(); }
  StoreStats stats() const override { return inner_->stats(); }
  SeqId create_sequence() override { return inner_->create_sequence(); }
  SeqId fork(SeqId parent) override { return inner_->fork(parent); }
  void reserve(std::span<const SeqId> sequences, std::span<const std::uint32_t> tokens) override {
    inner_->reserve(sequences, tokens);
  }
  void append(std::uint32_t layer, std::span<const SeqId> sequences,
              std::span<const std::uint32_t> counts, const DLTensor& k,
              const DLTensor& v) override {
    inner_->append(layer, sequences, counts, k, v);
  }
  void unreserve(SeqId sequence, std::uint64_t tokens) override {
    inner_->unreserve(sequence, tokens);
  }
  std::uint64_t drop(SeqId sequence, std::span<const PositionRange> ranges) override {
    return inner_->drop(sequence, ranges);
  }
  std::uint64_t length(SeqId sequence) const override { return inner_->length(sequence); }
  std::uint64_t written(SeqId sequence, std::uint32_t layer) const override {
    return inner_->written(sequence, layer);
  }
  std::vector<Position> positions(SeqId sequence) const override {
    return inner_->positions(sequence);
  }
  std::vector<float> scores(SeqId sequence) const override { return inner_->scores(sequence); }
  std::uint64_t evict_cached(std::uint64_t count) override { return inner_->evict_cached(count); }
  std::uint64_t lookup_prefix(std::span<const std::int32_t> token_ids) const override {
    return inner_->lookup_prefix(token_ids);
  }
  void export_page(std::uint32_t page, std::span<std::byte> image) const override {
    inner_->export_page(page, image);
  }
  PageImport import_page(std::span<const std::int32_t> token_ids,
                         std::span<const std::byte> image) override {
    return inner_->import_page(token_ids, image);
  }
  PageTable page_table(std::span<const SeqId> sequences) const override {
    return inner_->page_table(sequences);
  }
  void gather(std::uint32_t layer, SeqId sequence, DLTensor& k, DLTensor& v) const override {
    inner_->gather(layer, sequence, k, v);
  }
  std::vector<std::byte> read_tile(std::uint32_t page, std::uint32_t layer, std::uint32_t kv_head,
                                   bool value) const override {
    return inner_->read_tile(page, layer, kv_head, value);
  }

  struct State;

 private:
  // Pulls pages [from, to) of token_ids while they come, verified, in order; returns how many
  // were imported (or found present).
  std::uint64_t pull(std::span<const std::int32_t> token_ids, std::uint64_t from, std::uint64_t to);

  std::unique_ptr<CacheStore> inner_;
  std::unique_ptr<ByteStore> remote_;
  std::unique_ptr<State> state_;
};

}  // namespace kvcache::remote
