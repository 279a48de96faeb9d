// `kvcache bench step`: decode steps of B sequences x L layers at T cached tokens through the
// Cache, once planned per step (begin_step, then append and decode per layer, finish) and once
// through the per-layer calls (reserve, append and decode per layer, end_step), the two taking
// turns step by step in one run. Reports where a step's time goes: the attention kernels, the
// appends, and the rest (reserve, positions, mask, plan, dispatch, the policy's hook).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <dlpack/dlpack.h>
#include <CLI/CLI.hpp>
#include <optional>

#include <nlohmann/json.hpp>

#include "kvcache/engine_stream.hpp"
#include "kvcache/registry.hpp"

namespace kvcache::tool {

struct StepBenchOptions {
  std::string backend = "cpu-tbb";
  std::string format = "fp16";
  std::uint32_t batch = 1;
  std::uint32_t layers = 32;
  std::uint64_t tokens = 4096;  // cached tokens per sequence before the first measured step
  std::uint32_t q_heads = 9;    // SmolLM2's attention shape
  std::uint32_t kv_heads = 3;
  std::uint32_t head_dim = 64;
  std::uint32_t page_size = 16;
  std::uint32_t steps = 20;  // measured steps of each kind
  // A hybrid model (docs/configuration.md#layers): with a window, every global_every-th layer
  // (the last of each run, as Gemma 3's 5, 11, ...) is global and the others slide over `window`
  // tokens. 0: every layer global.
  std::uint32_t window = 0;
  std::uint32_t global_every = 6;
  // KV bytes of the cache; then `batch` is the most sequences, and as many as fit are filled
  // (StepBenchResult::sequences). 0: room for the batch.
  std::uint64_t capacity = 0;
  // The planned steps on the tensor memory's stream (StepOptions::stream): nothing waits until
  // finish(). Only with a TensorMemory that has one (kvcache-device-step-benchmark).
  bool engine_stream = false;
};

// The options of `kvcache bench step` (and of kvcache-device-step-benchmark), into `o`.
void add_step_options(CLI::App& command, StepBenchOptions& o);

// Where the measured steps' tensors (new K/V rows, q, out) live: host memory, unless a program
// that owns device memory passes its own (tools/bench/device_step_benchmark.cpp), as an engine
// holds them.
class TensorMemory {
 public:
  virtual ~TensorMemory() = default;
  virtual std::string name() const = 0;  // as the JSON reports it: "host", "cuda device 0"
  virtual DLDevice device() const = 0;
  // `bytes` of this memory holding a copy of `host`, alive as long as this object.
  virtual void* copy_of(const void* host, std::size_t bytes) = 0;
  // The stream its owner computes on, for steps on the engine's stream; none: host memory.
  virtual std::optional<EngineStream> stream() const { return std::nullopt; }
};

// Medians over the measured steps, in seconds per step.
struct StepTimes {
  double total = 0.0;
  double attention = 0.0;  // inside the decode calls
  double append = 0.0;
  // total - attention kernels - appends (see attention_kernels); for planned steps the median of
  // each step's total - its appends - its attention calls.
  double outside = 0.0;
  double begin = 0.0;   // of outside: begin_step, or the per-layer calls' reserve
  double finish = 0.0;  // of outside: finish, or end_step
};

struct StepBenchResult {
  StepTimes planned;  // begin_step ... finish
  StepTimes layered;  // the per-layer calls
  // The kernels' own time per step: the planned steps' decode calls, which run on a plan made
  // before them. A per-layer decode call spends the same in kernels plus its own planning, so
  // both kinds' `outside` subtract this.
  double attention_kernels = 0.0;
  std::uint64_t kv_bytes = 0;    // read by the median step's attention, all layers
  std::uint64_t used_bytes = 0;  // the cache's pages in use after the measured steps (stats())
  std::uint32_t sequences = 0;   // that ran the steps: the batch, or with a capacity as many as fit
  std::uint64_t capacity_bytes = 0;
  std::string tensors = "host";  // where the measured steps' tensors were (TensorMemory::name)
};

// memory: where the measured steps' tensors live; null: the host.
StepBenchResult run_step_benchmark(std::shared_ptr<const Registry> registry,
                                   const StepBenchOptions& options, TensorMemory* memory = nullptr);
nlohmann::json to_json(const StepBenchOptions& options, const StepBenchResult& result);

}  // namespace kvcache::tool
