// Attention over a CacheStore (docs/architecture.md): decode (one query token per
// sequence) and prefill (many per sequence), MHA/GQA/MQA, any mask through the visible ranges
// it answered, every stored format read in place.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <dlpack/dlpack.h>

#include "kvcache/cache_store.hpp"
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

struct AttentionRequest {
  std::uint32_t layer = 0;
  std::span<const SeqId> sequences;
  // Queries per sequence, the last written slots of `layer` in order. Empty for decode: one each.
  std::span<const std::uint32_t> query_counts;
  const DLTensor* q = nullptr;  // [queries, q_heads, head_dim], float32/float16/bfloat16, host
  DLTensor* out = nullptr;      // [queries, q_heads, head_dim], float32/float16/bfloat16, host
  VisibleRanges visible;        // one entry per query
  float scale = 0.0f;           // 0: 1 / sqrt(head_dim)
  // Adds each key's softmax weight, summed over query heads, to the store's per-slot scores
  // (what score-based eviction such as H2O reads).
  bool accumulate_scores = false;
};

// What a step's attention is planned from: an AttentionRequest without the layer and the tensors,
// for every layer of the step. The queries of sequences[i] are its newest query_counts[i] reserved
// slots (one each when query_counts is empty: decode).
struct StepRequest {
  std::span<const SeqId> sequences;
  std::span<const std::uint32_t> query_counts;
  VisibleRanges visible;
  float scale = 0.0f;
  bool accumulate_scores = false;
};

// A step's attention, planned once and run for each layer (FlashInfer's plan/run): a backend keeps
// here what does not depend on the layer, such as slot spans, work items and, on a GPU, their
// upload. A plan is made from the sequences' reserved slots; it is valid while they keep their
// shape (no reserve, drop, release, fork or prefix match in between), and run() refuses it after.
class StepPlan {
 public:
  virtual ~StepPlan() = default;
};

class Attention {
 public:
  virtual ~Attention() = default;
  // One query token per sequence (query_counts empty).
  virtual void decode(CacheStore& store, const AttentionRequest& request) = 0;
  // query_counts[i] query tokens for sequences[i], e.g. a prompt chunk just appended.
  virtual void prefill(CacheStore& store, const AttentionRequest& request) = 0;

  // Plans a step. The default keeps a copy of the request for run(), which then calls decode or
  // prefill per layer: a backend with nothing to share between layers implements neither.
  virtual std::unique_ptr<StepPlan> plan(CacheStore& store, const StepRequest& request);
  // One layer of a step planned by this attention: q and out are [queries, q_heads, head_dim].
  // Every sequence must have all its reserved slots of `layer` written (append, then attend).
  virtual void run(CacheStore& store, const StepPlan& plan, std::uint32_t layer, const DLTensor& q,
                   DLTensor& out);
};

// The plan Attention's default plan() makes: the request, copied.
class RequestCopy final : public StepPlan {
 public:
  explicit RequestCopy(const StepRequest& request);
  RequestCopy(const RequestCopy&) = delete;  // rotations_ views its own members
  RequestCopy& operator=(const RequestCopy&) = delete;
  // The request of one layer, viewing this copy.
  AttentionRequest request(std::uint32_t layer, const DLTensor& q, DLTensor& out) const;
  bool prefill() const { return !query_counts_.empty(); }

 private:
  std::vector<SeqId> sequences_;
  std::vector<std::uint32_t> query_counts_;
  std::vector<PositionRange> ranges_;
  std::vector<std::uint32_t> range_counts_;
  std::uint32_t max_ranges_;
  std::vector<float> cos_sin_;
  std::vector<std::uint32_t> range_rotation_;
  QueryRotations rotations_;  // viewing the two above
  float scale_;
  bool accumulate_scores_;
};

}  // namespace kvcache
