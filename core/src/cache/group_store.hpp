// The store of a layer group after the first, under the Cache's sequence ids. Each group's
// backend store numbers its own sequences; the Cache's ids are its first group's, and this store
// maps them onto its own, so that every group's store answers to the same ids.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "kvcache/forwarding_store.hpp"
#include "kvcache/status.hpp"

namespace kvcache {

class GroupStore final : public ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;

  // The store's own id of the Cache's sequence `id`.
  SeqId own(SeqId id) const {
    const auto it = own_.find(id);
    if (it == own_.end()) throw Error(Code::not_found, "no sequence " + std::to_string(id));
    return it->second;
  }
  std::vector<SeqId> own(std::span<const SeqId> ids) const {
    std::vector<SeqId> out;
    out.reserve(ids.size());
    for (const SeqId id : ids) out.push_back(own(id));
    return out;
  }
  // A new sequence (or a fork of `parent`) of this store, known by the Cache as `id`.
  void create_as(SeqId id) { adopt(id, inner_->create_sequence()); }
  void fork_as(SeqId parent, SeqId id) { adopt(id, inner_->fork(own(parent))); }

  void release(SeqId id) override {
    inner_->release(own(id));
    own_.erase(id);
  }
  void reserve(std::span<const SeqId> ids, std::span<const std::uint32_t> tokens) override {
    inner_->reserve(own(ids), tokens);
  }
  void append(std::uint32_t layer, std::span<const SeqId> ids,
              std::span<const std::uint32_t> counts, const DLTensor& k,
              const DLTensor& v) override {
    inner_->append(layer, own(ids), counts, k, v);
  }
  void append_on(EngineStream stream, std::uint32_t layer, std::span<const SeqId> ids,
                 std::span<const std::uint32_t> counts, const DLTensor& k,
                 const DLTensor& v) override {
    inner_->append_on(stream, layer, own(ids), counts, k, v);
  }
  void unreserve(SeqId id, std::uint64_t tokens) override { inner_->unreserve(own(id), tokens); }
  void truncate(SeqId id, std::uint64_t tokens) override { inner_->truncate(own(id), tokens); }
  std::uint64_t drop(SeqId id, std::span<const PositionRange> ranges) override {
    return inner_->drop(own(id), ranges);
  }
  std::uint64_t drop_unseen(SeqId id, std::span<const PositionRange> ranges) override {
    return inner_->drop_unseen(own(id), ranges);
  }
  std::uint64_t length(SeqId id) const override { return inner_->length(own(id)); }
  std::uint64_t written(SeqId id, std::uint32_t layer) const override {
    return inner_->written(own(id), layer);
  }
  std::vector<Position> positions(SeqId id) const override { return inner_->positions(own(id)); }
  std::vector<float> scores(SeqId id) const override { return inner_->scores(own(id)); }
  void publish_prefix(SeqId id, std::span<const std::int32_t> token_ids) override {
    inner_->publish_prefix(own(id), token_ids);
  }
  std::uint64_t match_prefix(SeqId id, std::span<const std::int32_t> token_ids) override {
    return inner_->match_prefix(own(id), token_ids);
  }
  bool attach_prefix(SeqId id, std::span<const std::int32_t> token_ids,
                     std::span<const std::uint64_t> pages) override {
    return inner_->attach_prefix(own(id), token_ids, pages);
  }
  PageTable page_table(std::span<const SeqId> ids) const override {
    return inner_->page_table(own(ids));
  }
  void gather(std::uint32_t layer, SeqId id, DLTensor& k, DLTensor& v) const override {
    inner_->gather(layer, own(id), k, v);
  }

 private:
  // Refused: the Cache names every sequence (create_as, fork_as).
  SeqId create_sequence() override {
    throw Error(Code::internal, "a group's store makes sequences through create_as");
  }
  SeqId fork(SeqId) override {
    throw Error(Code::internal, "a group's store forks sequences through fork_as");
  }
  void adopt(SeqId id, SeqId mine) {
    try {
      own_.emplace(id, mine);
    } catch (...) {
      inner_->release(mine);
      throw;
    }
  }
  std::unordered_map<SeqId, SeqId> own_;
};

}  // namespace kvcache
