// One step of an engine through the Cache, planned once and run for every layer (see
// docs/engine-step.md):
//
//   Step step = cache.begin_step(sequences, new_tokens);  // reserve, positions, mask, plan
//   for (layer...) { step.append(layer, k, v); step.decode(layer, q, out); }
//   EvictionReport report = step.finish();                 // the policy's proactive hook
//
// On a GPU backend that declares engine_streams, StepOptions::stream puts the step's appends and
// attention on the engine's stream: with device tensors nothing waits until finish(), which waits
// once for the stream, or not at all when it is given an event to record (docs/engine-step.md,
// "Streams"). Without a stream each call's work is done when it returns.
//
// begin_step reserves all or nothing (evicting per the policy; what it evicted is report() at
// once, and members of the batch it preempted leave the step: sequences() is the batch the
// tensors follow). If the mask or the plan then fails, the reserve is undone and the error
// arrives as an EvictionError carrying what was evicted, when something was. A step is all or
// nothing too: finish() keeps its tokens, a step dropped unfinished gives them back. Out-of-order
// calls (attention before append on a layer, a layer twice, any call after finish) throw
// Error(invalid_argument) and change nothing. While a step is open the Cache refuses calls that
// would change its sequences (release, fork, prefix match of a member) and, from the thread that
// opened it, the stepping calls (reserve, another step, the per-layer calls); other threads'
// stepping calls wait for it to close (docs/cache.md, "Threads"). A Step must not outlive its
// Cache.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include <dlpack/dlpack.h>

#include "kvcache/engine_stream.hpp"
#include "kvcache/eviction_report.hpp"
#include "kvcache/export.hpp"
#include "kvcache/host_only.hpp"
#include "kvcache/types.hpp"

namespace kvcache {

// How a step's work reaches the device.
struct StepOptions {
  // The engine's stream for every append and attention of the step (a backend that does not
  // declare engine_streams refuses it at begin_step). Empty: the backend's own stream.
  std::optional<EngineStream> stream;
  // With a stream: finish() records this cudaEvent_t or hipEvent_t after the step's work instead
  // of waiting for it, and the engine waits on the event where it needs the results.
  void* event = nullptr;
};

class KVCACHE_API Step {
 public:
  Step(Step&&) noexcept;
  Step& operator=(Step&&) noexcept;
  // A step dropped before finish() is undone: its sequences give back the step's slots, written
  // or not, and are as before begin_step (what its reserve evicted stays evicted: report()). A
  // store that cannot give slots back (before ABI 1.5) leaves them part-written; the Cache then
  // refuses them in later steps, saying so. The policy's hook does not run.
  ~Step();

  // The batch, in the order of the tensors' rows, and each member's new tokens.
  std::span<const SeqId> sequences() const;
  std::span<const std::uint32_t> new_tokens() const;
  // Rows of append's k and v, and of prefill's q and out: the sum of new_tokens().
  std::uint64_t tokens() const;
  // What begin_step's reserve evicted (empty when memory sufficed).
  const EvictionReport& report() const;

  // K and V of `layer` for the step's new tokens: [tokens(), kv_heads, head_dim].
  void append(std::uint32_t layer, const DLTensor& k, const DLTensor& v);
  // One query per sequence, its newest token: [sequences, q_heads, head_dim]. Only for a step of
  // one new token per sequence.
  void decode(std::uint32_t layer, const DLTensor& q, DLTensor& out);
  // The queries of every new token: [tokens(), q_heads, head_dim].
  void prefill(std::uint32_t layer, const DLTensor& q, DLTensor& out);
  // Ends the step: every layer must have been appended (unless the step has no tokens). Runs the
  // policy's proactive hook and returns all that the step evicted, begin_step's report included.
  // An EvictionError from finish() means the step stands and the hook failed (its report: what
  // was evicted); any other error means the step is still open, unchanged.
  [[nodiscard]] EvictionReport finish();

  struct State;

 private:
  friend class Cache;
  explicit Step(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace kvcache
