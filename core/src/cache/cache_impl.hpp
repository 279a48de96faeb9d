// The Cache's state, shared by the facade (cache.cpp) and its steps (step.cpp).
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cache/group_store.hpp"
#include "kvcache/cache.hpp"
#include "kvcache/remote/tiered_store.hpp"
#include "kvcache/rope.hpp"

namespace kvcache {

struct SequenceInfo {
  std::int32_t priority = 50;
  std::uint64_t created_step = 0;
  std::uint64_t last_used_step = 0;
  Position next_position = 0;
  // Set when an unfinished step's tokens could not be given back (a store before ABI 1.5): the
  // sequence is part-written and cannot take part in a step again. why_broken says what failed.
  bool broken = false;
  std::string why_broken;
  // In a cache where a group frees pages behind its window: the tokens given to match_prefix or
  // publish_prefix, whose full pages every group publishes at the end of each step, before the
  // window leaves them behind (prefix.cpp).
  std::vector<std::int32_t> tokens;
};

// Rethrows the exception in flight as an EvictionError carrying `report` (what the failed call had
// evicted, which the caller must act on; an EvictionError in flight adds its own); as it is when
// the report is empty, unless `always`.
[[noreturn]] void rethrow_with(EvictionReport report, bool always = false);

struct Cache::Impl {
  // One layer group's store, attention and mask; a uniform cache has one group of every layer.
  struct Group {
    LayerGroupInfo info;
    // What the Cache calls, under its own sequence ids: the backend's store, the remote tier in
    // front of it, or (after the first group) the GroupStore that maps the ids.
    std::unique_ptr<CacheStore> store;
    // The backend's own store, which the group's attention reads under the store's own ids.
    CacheStore* kv = nullptr;
    GroupStore* map = nullptr;  // after the first group; null: the Cache's ids are kv's
    remote::TieredStore* tier = nullptr;
    std::unique_ptr<Attention> attention;
    std::unique_ptr<AttentionMask> mask;
    // When the mask places queries within the cache: the model's RoPE and its frequencies.
    Rope rope;
    std::vector<double> rope_frequencies;
    // kv's ids of the Cache's sequences `ids`.
    std::vector<SeqId> own(std::span<const SeqId> ids) const {
      return map != nullptr ? map->own(ids) : std::vector<SeqId>(ids.begin(), ids.end());
    }
  };

  std::shared_ptr<const Registry> registry;
  std::string backend_name;
  ModelShape model;
  std::unique_ptr<Backend> backend;
  std::vector<Group> groups;
  std::vector<LayerGroupInfo> infos;       // each group's info, for Cache::groups()
  std::vector<LayerPlace> places;          // of each model layer
  std::unique_ptr<EvictionPolicy> policy;  // null: no eviction
  std::map<SeqId, SequenceInfo> sequences;
  std::uint64_t step = 0;
  std::uint32_t page_size = 0;

  SequenceInfo& info(SeqId id) {
    const auto it = sequences.find(id);
    if (it == sequences.end()) throw Error(Code::not_found, "no sequence " + std::to_string(id));
    return it->second;
  }
  const LayerPlace& place(std::uint32_t layer) const {
    if (layer >= places.size())
      throw Error(Code::invalid_argument, "layer " + std::to_string(layer) +
                                              " out of range (the model has " +
                                              std::to_string(places.size()) + ")");
    return places[layer];
  }

  // Asks the policy (`decide(state)` over group g's CacheState) and carries out its plan,
  // adding what it removed to `report`. Returns whether the plan removed anything.
  template <class Decide>
  bool consult(std::size_t g, Decide&& decide, EvictionReport& report);
  // Carries out a plan made over group g, adding exactly what it removed to `report` as it goes:
  // whatever fails part way (an Error, std::bad_alloc), what was done is already in `report`.
  void apply(std::size_t g, const EvictionPlan& plan, EvictionReport& report);
  // Pages of group g that a reserve of these tokens needs beyond what is free or cached; none
  // when its pool had room for it (a failed reserve then ran out of something else).
  std::optional<std::uint64_t> shortfall(std::size_t g, std::span<const SeqId> ids,
                                         std::span<const std::uint32_t> tokens);
  // The sequence leaves every group's store and the Cache (a preemption, a release).
  void forget(SeqId id);
  // What group g's mask lets each query see and, with a mask that places queries within the
  // cache, the rotation of each query for each range where it stands elsewhere than at its own
  // position.
  struct Visible {
    std::vector<PositionRange> ranges;
    std::vector<std::uint32_t> counts;
    std::uint32_t max_ranges = 1;
    RotationTable rotations;
    VisibleRanges view() const { return {ranges, counts, max_ranges, rotations.view()}; }
  };
  // For the newest counts[i] tokens of ids[i] (one each when counts is empty).
  Visible visible_for(const Group& group, std::span<const SeqId> ids,
                      std::span<const std::uint32_t> counts) const;
  // The group's attention planned for the newest counts[i] tokens of ids[i] (the cache's ids;
  // `own` the same in the group's store): a step's every layer, or one per-layer call.
  std::unique_ptr<StepPlan> plan_group(const Group& group, std::span<const SeqId> ids,
                                       std::span<const SeqId> own,
                                       std::span<const std::uint32_t> counts,
                                       std::optional<EngineStream> stream = {}) const;
  // Marks the sequences used in this step.
  void mark_used(std::span<const SeqId> ids) {
    for (const SeqId id : ids) info(id).last_used_step = step;
  }
  // After each model step: the groups that free pages behind their window do, then the policy's
  // proactive hook runs, its evictions added to `report`.
  void after_step(EvictionReport& report);
  bool wants_scores() const { return policy && policy->wants_scores(); }

  // Prefix reuse across groups (prefix.cpp): the longest prefix of token_ids, in whole pages,
  // that every group can serve now; a windowed group needs only the pages a query at its end
  // sees, listed in `pages` (empty for the other groups).
  struct PrefixHit {
    std::uint64_t tokens = 0;
    std::vector<std::vector<std::uint64_t>> pages;
  };
  PrefixHit prefix_hit(std::span<const std::int32_t> token_ids) const;
  // Attaches `hit` to the empty sequence `id` in every group; all or nothing (false: a store did
  // not attach what it said it held, and the sequence is empty again).
  bool attach(SeqId id, std::span<const std::int32_t> token_ids, const PrefixHit& hit);
  bool frees_pages = false;    // some group frees pages behind its window
  std::uint32_t rollback = 0;  // layers.rollback: tokens a windowed group keeps behind its window

  // One layer's attention through the per-layer calls (planned for this call alone).
  void attend(std::uint32_t layer, std::span<const SeqId> ids,
              std::span<const std::uint32_t> counts, const DLTensor& q, DLTensor& out);
  // A new sequence (or a fork of `parent`) in every group's store, and its Cache entry: all or
  // nothing. Returns its id.
  SeqId create(const SeqId* parent);
  // The sequence, refused for a step when an unfinished one left it part-written.
  SequenceInfo& steppable(const char* call, SeqId id) {
    SequenceInfo& s = info(id);
    if (s.broken)
      throw Error(Code::invalid_argument,
                  std::string(call) + ": sequence " + std::to_string(id) +
                      " holds part of a step that did not finish and could not be undone (" +
                      s.why_broken + "); release it");
    return s;
  }
  // Undoes a reserve of counts[i] tokens for ids[i] in groups [0, groups_done) (a step that did
  // not finish, or a reserve that a later group refused); with every group, the positions are
  // handed out again. A sequence whose store cannot is marked broken. Never throws.
  void undo_reserve(std::span<const SeqId> ids, std::span<const std::uint32_t> counts,
                    std::size_t groups_done) noexcept;
  void undo_reserve(std::span<const SeqId> ids, std::span<const std::uint32_t> counts) noexcept {
    undo_reserve(ids, counts, groups.size());
  }
  // Room for counts[i] more tokens in batch[i] in every group, evicting per the policy; members
  // of the batch it preempts leave batch and counts. Throws CacheFull when it still does not
  // fit.
  EvictionReport reserve(std::vector<SeqId>& batch, std::vector<std::uint32_t>& counts);

  // Threads (docs/cache.md, "Threads"): every public call of the Cache and of its Step holds
  // `mutex`, so calls from several threads are serialized whole. One step is open at a time: the
  // stepping calls (begin_step, reserve, append, decode, prefill, end_step) of another thread
  // wait until it closes, the same calls of the thread that opened it are refused, and calls on
  // other sequences (add, release, fork, prefix) go on meanwhile; those on the step's own
  // sequences are refused.
  mutable std::mutex mutex;
  std::condition_variable step_closed;
  bool step_open = false;
  std::thread::id step_owner;
  const std::vector<SeqId>* step_sequences = nullptr;  // the open step's batch

  // Before a stepping call, with `lock` held: waits for another thread's open step to close;
  // refuses the call on the thread whose step is open.
  void wait_for_step(std::unique_lock<std::mutex>& lock, const char* call) {
    if (step_open && step_owner == std::this_thread::get_id())
      throw Error(Code::invalid_argument,
                  std::string(call) + ": a step is open; finish it (or drop it) first");
    step_closed.wait(lock, [&] { return !step_open; });
  }
  // A call that changes `id` while it is a member of the open step is refused.
  void refuse_for_step_member(const char* call, SeqId id) const {
    if (step_open &&
        std::find(step_sequences->begin(), step_sequences->end(), id) != step_sequences->end())
      throw Error(Code::invalid_argument, std::string(call) + ": sequence " + std::to_string(id) +
                                              " is in the open step; finish it (or drop it) first");
  }
  void open_step(const std::vector<SeqId>& sequences) {
    step_open = true;
    step_owner = std::this_thread::get_id();
    step_sequences = &sequences;
  }
  void close_step() {
    step_open = false;
    step_sequences = nullptr;
    step_closed.notify_all();
  }
};

}  // namespace kvcache
