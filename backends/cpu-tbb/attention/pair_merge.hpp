// The merge of partial softmax states (FlashInfer's cascade.cuh): the items over a (query, kernel
// head) pair (see WorkSchedule) each leave a partial state; the task that finishes a pair's last
// one merges them into its final state and writes the pair's output rows, while the parts are
// still in cache (merged at the end of the call instead, every read of a part is a cache miss).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <optional>

#include <dlpack/dlpack.h>

#include "attention/layer_run.hpp"

namespace kvcache::cpu {

class PairMerge {
 public:
  // Writes into out, [queries, q_heads, head_dim] float32, float16 or bfloat16.
  PairMerge(LayerRun& run, DLTensor& out);
  // The state of an item, laid out by its task just before its kernels use it (zeroed up front
  // instead, their lines would have left the caches by the time the items run).
  SoftmaxState& start(std::size_t item);
  // After an item's kernels: counts its pairs down, merging those it completes.
  void finished(std::size_t item, float* row);
  // The pairs that see no key at all (no parts): their outputs are zeros.
  void finish_unseen();

  // After every item: a pair's final state and its heads' weight sums (for the score pass).
  const SoftmaxState& final_state(std::size_t pair) const { return *finals_[pair]; }
  float weight_sum(std::size_t pair, std::uint32_t g) const {
    return weight_sums_[pair * run_.group + g];
  }

 private:
  void finish(std::uint64_t pair, float* row);

  LayerRun& run_;
  DLTensor& out_;
  float* state_memory_;
  std::pmr::vector<std::optional<SoftmaxState>> partial_;   // per item
  std::pmr::vector<std::atomic<std::uint32_t>> remaining_;  // per pair: parts still to run
  // A pair's final state: its first part when that is one query's own (its other parts merged
  // in), else a state of its own (a tile's part holds other queries' heads too, and a query that
  // sees no keys has no parts). A state of its own comes from operator new, not the arena (tasks
  // run concurrently).
  std::pmr::vector<SoftmaxState*> finals_;
  std::pmr::vector<std::optional<SoftmaxState>> own_;
  std::pmr::vector<float> weight_sums_;  // [pair][group]
};

}  // namespace kvcache::cpu
