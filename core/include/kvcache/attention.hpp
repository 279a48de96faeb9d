// Attention over a CacheStore (docs/architecture.md), planned once per step and run per layer:
// decode (one query token per sequence) and prefill (many per sequence), MHA/GQA/MQA, any mask
// through the visible ranges it answered, every stored format read in place.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include <dlpack/dlpack.h>

#include "kvcache/cache_store.hpp"
#include "kvcache/engine_stream.hpp"
#include "kvcache/query_rotation.hpp"
#include "kvcache/types.hpp"

namespace kvcache {

// What a mask answered for each query: at most max_ranges ascending ranges of logical positions
// per query, at ranges[i * max_ranges], counts[i] of them; and, where the mask places the query
// elsewhere for a range (RoPE positions within the cache), the rotation of the query for it.
struct VisibleRanges {
  std::span<const PositionRange> ranges;
  std::span<const std::uint32_t> counts;
  std::uint32_t max_ranges = 1;
  QueryRotations rotations;  // empty: every range sees the query as it is
};

// What a step's attention is planned from, for every layer of the step: the sequences, their
// queries (those of sequences[i] are its newest query_counts[i] reserved slots; one each when
// query_counts is empty: decode) and what the mask lets each query see. The Cache's per-layer
// calls are steps of one layer.
struct StepRequest {
  std::span<const SeqId> sequences;
  std::span<const std::uint32_t> query_counts;
  VisibleRanges visible;  // one entry per query
  float scale = 0.0f;     // 0: 1 / sqrt(head_dim)
  // Adds each key's softmax weight, summed over query heads, to the store's per-slot scores
  // (what score-based eviction such as H2O reads).
  bool accumulate_scores = false;
  // Empty: the backend's own stream, and each run's work is done when it returns. Set (only for a
  // backend that declares engine_streams): the plan's uploads, the runs and finish() go on the
  // engine's stream, and a run with device tensors returns without waiting.
  std::optional<EngineStream> stream;
};

// A step's attention, planned once and run for each layer (FlashInfer's plan/run): a backend keeps
// here what does not depend on the layer, such as slot spans, work items and, on a GPU, their
// upload. A plan is made from the sequences' reserved slots; it is valid while they keep their
// shape (no reserve, drop, release, fork or prefix match in between), and run() refuses it after.
class StepPlan {
 public:
  virtual ~StepPlan() = default;
};

// The one attention API: plan a step, then run it layer by layer.
class Attention {
 public:
  virtual ~Attention() = default;
  // Checks the request against the store and plans every layer of the step.
  virtual std::unique_ptr<StepPlan> plan(CacheStore& store, const StepRequest& request) = 0;
  // One layer of a step this attention planned: q and out are [queries, q_heads, head_dim],
  // float32/float16/bfloat16, in memory the backend takes. Every sequence must have all its
  // reserved slots of `layer` written (append, then attend).
  virtual void run(CacheStore& store, const StepPlan& plan, std::uint32_t layer, const DLTensor& q,
                   DLTensor& out) = 0;
  // The step's last call, for a plan made on an engine stream: waits for the step's work on it,
  // or, given an event (a cudaEvent_t or hipEvent_t), records the event after that work and
  // returns at once. A plan on the backend's own stream has nothing left: the default does nothing.
  virtual void finish(CacheStore& store, const StepPlan& plan, void* event) {
    (void)store, (void)plan, (void)event;
  }
};

}  // namespace kvcache
