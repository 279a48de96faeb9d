// A CacheStore that passes every call on to another: the base of decorators (the remote tier,
// the test stores that inject faults), which override only what they change.
#pragma once

#include <memory>

#include "kvcache/cache_store.hpp"

namespace kvcache {

class ForwardingStore : public CacheStore {
 public:
  explicit ForwardingStore(std::unique_ptr<CacheStore> inner) : inner_(std::move(inner)) {}
  CacheStore& inner() { return *inner_; }
  const CacheStore& inner() const { return *inner_; }

  StoreInfo info() const override { return inner_->info(); }
  StoreStats stats() const override { return inner_->stats(); }
  SeqId create_sequence() override { return inner_->create_sequence(); }
  void release(SeqId sequence) override { inner_->release(sequence); }
  SeqId fork(SeqId parent) override { return inner_->fork(parent); }
  void reserve(std::span<const SeqId> sequences, std::span<const std::uint32_t> tokens) override {
    inner_->reserve(sequences, tokens);
  }
  void append(std::uint32_t layer, std::span<const SeqId> sequences,
              std::span<const std::uint32_t> counts, const DLTensor& k,
              const DLTensor& v) override {
    inner_->append(layer, sequences, counts, k, v);
  }
  void append_on(EngineStream stream, std::uint32_t layer, std::span<const SeqId> sequences,
                 std::span<const std::uint32_t> counts, const DLTensor& k,
                 const DLTensor& v) override {
    inner_->append_on(stream, layer, sequences, counts, k, v);
  }
  void unreserve(SeqId sequence, std::uint64_t tokens) override {
    inner_->unreserve(sequence, tokens);
  }
  void truncate(SeqId sequence, std::uint64_t tokens) override {
    inner_->truncate(sequence, tokens);
  }
  std::uint64_t drop(SeqId sequence, std::span<const PositionRange> ranges) override {
    return inner_->drop(sequence, ranges);
  }
  std::uint64_t drop_unseen(SeqId sequence, std::span<const PositionRange> ranges) override {
    return inner_->drop_unseen(sequence, ranges);
  }
  std::uint64_t length(SeqId sequence) const override { return inner_->length(sequence); }
  std::uint64_t written(SeqId sequence, std::uint32_t layer) const override {
    return inner_->written(sequence, layer);
  }
  std::vector<Position> positions(SeqId sequence) const override {
    return inner_->positions(sequence);
  }
  std::vector<float> scores(SeqId sequence) const override { return inner_->scores(sequence); }
  void publish_prefix(SeqId sequence, std::span<const std::int32_t> token_ids) override {
    inner_->publish_prefix(sequence, token_ids);
  }
  std::uint64_t match_prefix(SeqId sequence, std::span<const std::int32_t> token_ids) override {
    return inner_->match_prefix(sequence, token_ids);
  }
  std::vector<std::uint8_t> prefix_pages(std::span<const std::int32_t> token_ids) const override {
    return inner_->prefix_pages(token_ids);
  }
  bool attach_prefix(SeqId sequence, std::span<const std::int32_t> token_ids,
                     std::span<const std::uint64_t> pages) override {
    return inner_->attach_prefix(sequence, token_ids, pages);
  }
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

 protected:
  std::unique_ptr<CacheStore> inner_;
};

}  // namespace kvcache
