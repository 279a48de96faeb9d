#include "step_benchmark.hpp"

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "kvcache/cache.hpp"
#include "kvcache/formats.hpp"
#include "validators.hpp"

namespace kvcache::tool {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

struct Samples {
  std::vector<double> total, attention, append;
  std::vector<double> begin, finish;  // begin_step / reserve and finish / end_step
};

// Fills each sequence with `tokens` cached tokens, every layer from one random buffer (the
// contents do not change the work): a few sequences at a time, so the input stays small, or,
// in a hybrid cache, a page at a time, so that a sliding group holds no more than its window
// and the page in flight. With `until_full`, one sequence at a time until one does not fit,
// which is released: the sequences that fit stay in `ids`.
void fill(Cache& cache, std::vector<SeqId>& ids, std::uint64_t tokens, bool hybrid,
          bool until_full) {
  const ModelShape& m = cache.model();
  const std::uint32_t page = cache.group_store(0).info().page_size;
  const std::uint64_t chunk =
      until_full ? 1 : std::max<std::uint64_t>(1, (std::uint64_t{1} << 22) / tokens);
  const std::uint64_t run = hybrid ? page : tokens;
  std::mt19937 rng(42);
  std::normal_distribution<float> normal;
  std::vector<float> rows(std::min<std::uint64_t>(chunk, ids.size()) * run * m.kv_heads *
                          m.head_dim);
  for (float& x : rows) x = normal(rng);
  for (std::uint64_t first = 0; first < ids.size(); first += chunk) {
    const std::uint64_t n = std::min<std::uint64_t>(chunk, ids.size() - first);
    const std::vector<SeqId> part(ids.begin() + static_cast<std::ptrdiff_t>(first),
                                  ids.begin() + static_cast<std::ptrdiff_t>(first + n));
    try {
      for (std::uint64_t done = 0; done < tokens; done += run) {
        const auto count = static_cast<std::uint32_t>(std::min(run, tokens - done));
        Step step = cache.begin_step(part, std::vector<std::uint32_t>(n, count));
        const Tensor t = Tensor::host(
            rows.data(), {static_cast<std::int64_t>(n * count), m.kv_heads, m.head_dim});
        for (std::uint32_t layer = 0; layer < m.layers; ++layer) step.append(layer, t, t);
        (void)step.finish();
      }
    } catch (const CacheFull&) {
      if (!until_full) throw;
      for (std::size_t i = first; i < ids.size(); ++i) cache.release(ids[i]);
      ids.resize(first);
      return;
    }
  }
}

}  // namespace

void add_step_options(CLI::App& command, StepBenchOptions& o) {
  command.add_option("--backend", o.backend, "backend component")->capture_default_str();
  command.add_option("--format", o.format, "storage format of K and V")->capture_default_str();
  command.add_option("--batch", o.batch, "sequences")
      ->capture_default_str()
      ->check(positive(o.batch));
  command.add_option("--layers", o.layers, "layers")
      ->capture_default_str()
      ->check(positive(o.layers));
  command.add_option("--tokens", o.tokens, "cached tokens per sequence")
      ->capture_default_str()
      ->check(positive(o.tokens));
  command.add_option("--q-heads", o.q_heads, "query heads")
      ->capture_default_str()
      ->check(positive(o.q_heads));
  command.add_option("--kv-heads", o.kv_heads, "KV heads")
      ->capture_default_str()
      ->check(positive(o.kv_heads));
  command.add_option("--head-dim", o.head_dim, "head dimension")
      ->capture_default_str()
      ->check(positive(o.head_dim));
  command.add_option("--page-size", o.page_size, "tokens per page")
      ->capture_default_str()
      ->check(whole_number(1, 1024));
  command
      .add_option("--window", o.window,
                  "a hybrid model: sliding layers over this many tokens (0: every layer global)")
      ->capture_default_str();
  command
      .add_option("--global-every", o.global_every,
                  "with --window: every N-th layer is global (Gemma 3: 6)")
      ->capture_default_str()
      ->check(whole_number(2, 1u << 20));
  command
      .add_option(
          "--capacity", o.capacity,
          "KV bytes; then --batch sequences at most, as many as fit (0: room for the batch)")
      ->capture_default_str();
  command.add_flag("--engine-stream", o.engine_stream,
                   "planned steps on the tensors' stream, waiting once at finish (device "
                   "tensors only)");
  command.add_option("--steps", o.steps, "measured steps of each kind")
      ->capture_default_str()
      ->check(positive(o.steps));
}

namespace {

// The cache of a step benchmark: the model, a layer group per kind of layer when hybrid, and
// room for every sequence's tokens and the measured steps, a page of slack each (a sliding layer
// keeps its window's pages, the one it fills and one for the step in flight), or --capacity.
Config step_config(const StepBenchOptions& o, const Registry& registry) {
  const std::uint64_t per_sequence = o.tokens + 2ull * o.steps + 2;
  const std::uint64_t pages = (per_sequence + o.page_size - 1) / o.page_size + 1;
  const bool hybrid = o.window > 0;
  std::uint32_t globals = o.layers;
  std::string layers;
  if (hybrid) {
    globals = o.layers / o.global_every;
    layers = fmt::format(
        "layers:\n  groups:\n    local: {{mask: {{name: sliding-window, window: {}}}}}\n"
        "    global: {{}}\n  pattern: [local x{}, global]\n  context: {}\n",
        o.window, o.global_every - 1, per_sequence);
  }
  Config config =
      parse_config(fmt::format("model: {{layers: {}, q_heads: {}, kv_heads: {}, head_dim: {}}}\n"
                               "backend: [{}]\nformat: {}\nmask: causal\neviction: none\n"
                               "cache: {{page_size: {}, prefix_caching: false}}\n{}",
                               o.layers, o.q_heads, o.kv_heads, o.head_dim, o.backend, o.format,
                               o.page_size, layers),
                   "<bench step>", {});
  Config one_layer = config;
  one_layer.model.layers = 1;
  one_layer.layer_groups.clear();
  const std::uint64_t layer_page = page_cost(store_spec(one_layer, registry));
  const std::uint64_t window_pages =
      std::min<std::uint64_t>(pages, (o.window + o.page_size - 1) / o.page_size + 2);
  config.cache.capacity_bytes =
      o.capacity > 0
          ? o.capacity
          : o.batch * layer_page * (globals * pages + (o.layers - globals) * window_pages);
  return config;
}

// The medians of the steps, what outside means (the step less its appends and the planned
// steps' attention kernels), and the KV the steps read.
StepBenchResult summarize(const Cache& cache, const StepBenchOptions& o, const Samples& planned,
                          const Samples& layered, std::size_t sequences,
                          const TensorMemory* memory) {
  StepBenchResult r;
  if (memory != nullptr) r.tensors = memory->name();
  r.attention_kernels = median(planned.attention);
  const auto times = [&](const Samples& s) {
    StepTimes t{median(s.total), median(s.attention), median(s.append), 0.0,
                median(s.begin), median(s.finish)};
    t.outside = t.total - t.append - r.attention_kernels;
    return t;
  };
  r.planned = times(planned);
  r.layered = times(layered);
  // A planned step's own outside, step by step: the median of differences, not a difference of
  // medians, which the noise of the kernels' time swamps.
  std::vector<double> outside;
  for (std::size_t i = 0; i < planned.total.size(); ++i)
    outside.push_back(planned.total[i] - planned.append[i] - planned.attention[i]);
  r.planned.outside = median(outside);
  // At the median step: the cached tokens, two warm-up steps and half the measured ones, or a
  // sliding layer's window of them.
  const std::uint64_t held = o.tokens + 2 + o.steps;
  for (std::size_t g = 0; g < cache.groups().size(); ++g) {
    const LayerGroupInfo& group = cache.groups()[g];
    const StoreInfo info = cache.group_store(g).info();
    const std::uint64_t slot_bytes =
        (info.k_format.tile_bytes + info.v_format.tile_bytes) / o.page_size;
    const std::uint64_t seen = group.frees_pages ? std::min<std::uint64_t>(held, o.window) : held;
    r.kv_bytes += sequences * seen * cache.model().kv_heads * slot_bytes * group.layers.size();
  }
  r.used_bytes = cache.stats().used_bytes();
  r.sequences = static_cast<std::uint32_t>(sequences);
  return r;
}

// The planned steps' options: on the tensor memory's stream with --engine-stream.
StepOptions options_of(const StepBenchOptions& o, const TensorMemory* memory) {
  if (!o.engine_stream) return {};
  if (memory == nullptr || !memory->stream())
    throw Error(Code::invalid_argument,
                "bench step: --engine-stream needs tensors in device memory with a stream "
                "(kvcache-device-step-benchmark)");
  return {memory->stream(), nullptr};
}

// What both kinds of step run on; the tensors change when a full cache drops a sequence.
struct StepInputs {
  Cache& cache;
  const std::vector<SeqId>& ids;
  const std::vector<std::uint32_t>& ones;
  const Tensor& kv;
  const Tensor& q;
  Tensor& out;
  StepOptions options;
};

// A step planned once: begin_step, append and decode per layer, finish.
void time_planned_step(const StepInputs& in, Samples& s) {
  const auto start = Clock::now();
  double attention = 0.0, append = 0.0;
  Step step = in.cache.begin_step(in.ids, in.ones, in.options);
  s.begin.push_back(seconds_since(start));
  for (std::uint32_t layer = 0; layer < in.cache.model().layers; ++layer) {
    const auto a = Clock::now();
    step.append(layer, in.kv, in.kv);
    const auto d = Clock::now();
    append += std::chrono::duration<double>(d - a).count();
    step.decode(layer, in.q, in.out);
    attention += seconds_since(d);
  }
  const auto f = Clock::now();
  (void)step.finish();
  s.finish.push_back(seconds_since(f));
  s.total.push_back(seconds_since(start));
  s.attention.push_back(attention);
  s.append.push_back(append);
}

// The per-layer calls: reserve, append and decode per layer, end_step.
void time_layered_step(const StepInputs& in, Samples& s) {
  const auto start = Clock::now();
  double attention = 0.0, append = 0.0;
  (void)in.cache.reserve(in.ids, in.ones);
  s.begin.push_back(seconds_since(start));
  for (std::uint32_t layer = 0; layer < in.cache.model().layers; ++layer) {
    const auto a = Clock::now();
    in.cache.append(layer, in.ids, in.ones, in.kv, in.kv);
    const auto d = Clock::now();
    append += std::chrono::duration<double>(d - a).count();
    in.cache.decode(layer, in.ids, in.q, in.out);
    attention += seconds_since(d);
  }
  const auto f = Clock::now();
  (void)in.cache.end_step();
  s.finish.push_back(seconds_since(f));
  s.total.push_back(seconds_since(start));
  s.attention.push_back(attention);
  s.append.push_back(append);
}

}  // namespace

StepBenchResult run_step_benchmark(std::shared_ptr<const Registry> registry,
                                   const StepBenchOptions& o, TensorMemory* memory) {
  if (o.batch == 0 || o.layers == 0 || o.steps == 0 || o.tokens == 0)
    throw Error(Code::invalid_argument, "bench step: batch, layers, tokens and steps must be > 0");
  const bool hybrid = o.window > 0;
  const Config config = step_config(o, *registry);
  const auto cache = Cache::open(config, registry);
  const ModelShape& m = cache->model();

  std::vector<SeqId> ids;
  for (std::uint32_t i = 0; i < o.batch; ++i) ids.push_back(cache->add_sequence());
  fill(*cache, ids, o.tokens, hybrid, o.capacity > 0);
  if (ids.empty())
    throw Error(Code::invalid_argument, "bench step: --capacity holds no sequence of " +
                                            std::to_string(o.tokens) + " tokens");
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;

  std::vector<float> kv(ids.size() * m.kv_heads * m.head_dim),
      q(ids.size() * m.q_heads * m.head_dim), out(q.size());
  for (float& x : kv) x = normal(rng);
  for (float& x : q) x = normal(rng);
  // In the memory asked for, filled once (the values do not change the work); a batch that
  // shrinks (below) takes the first rows.
  const auto place = [&](std::vector<float>& v) {
    return memory == nullptr ? v.data() : memory->copy_of(v.data(), v.size() * sizeof(float));
  };
  void* const kv_data = place(kv);
  void* const q_data = place(q);
  void* const out_data = place(out);
  const DLDevice device = memory == nullptr ? DLDevice{kDLCPU, 0} : memory->device();
  const auto tensor = [&](void* data, std::uint32_t heads) {
    return Tensor(data, {kDLFloat, 32, 1}, device,
                  {static_cast<std::int64_t>(ids.size()), heads, m.head_dim});
  };
  Tensor kvt = tensor(kv_data, m.kv_heads), qt = tensor(q_data, m.q_heads),
         ot = tensor(out_data, m.q_heads);
  std::vector<std::uint32_t> ones(ids.size(), 1);

  const StepInputs in{*cache, ids, ones, kvt, qt, ot, options_of(o, memory)};
  Samples planned, layered, warm;
  for (;;) {
    try {
      time_planned_step(in, warm);
      time_layered_step(in, warm);
      for (std::uint32_t i = 0; i < o.steps; ++i) {  // taking turns: the host's noise hits both
        time_planned_step(in, planned);
        time_layered_step(in, layered);
      }
      break;
    } catch (const CacheFull&) {
      // A capacity that the fill used up: the newest sequence goes, and the steps start again.
      if (o.capacity == 0 || ids.size() == 1) throw;
      cache->release(ids.back());
      ids.pop_back();
      ones.pop_back();
      kvt = tensor(kv_data, m.kv_heads), qt = tensor(q_data, m.q_heads);
      ot = tensor(out_data, m.q_heads);
      planned = layered = warm = {};
    }
  }

  StepBenchResult r = summarize(*cache, o, planned, layered, ids.size(), memory);
  r.capacity_bytes = config.cache.capacity_bytes;
  return r;
}

nlohmann::json to_json(const StepBenchOptions& o, const StepBenchResult& r) {
  const auto times = [](const StepTimes& t) {
    return nlohmann::json{{"step_seconds", t.total},
                          {"attention_seconds", t.attention},
                          {"append_seconds", t.append},
                          {"outside_seconds", t.outside},
                          {"begin_seconds", t.begin},
                          {"finish_seconds", t.finish},
                          {"outside_fraction", t.outside / t.total}};
  };
  return {{"backend", o.backend},
          {"format", o.format},
          {"batch", o.batch},
          {"layers", o.layers},
          {"tokens", o.tokens},
          {"q_heads", o.q_heads},
          {"kv_heads", o.kv_heads},
          {"head_dim", o.head_dim},
          {"steps", o.steps},
          {"tensors", r.tensors},
          {"engine_stream", o.engine_stream},
          {"attention_kernel_seconds", r.attention_kernels},
          {"window", o.window},
          {"global_every", o.global_every},
          {"sequences", r.sequences},
          {"capacity_bytes", r.capacity_bytes},
          {"kv_bytes", r.kv_bytes},
          {"used_bytes", r.used_bytes},
          {"planned", times(r.planned)},
          {"per_layer", times(r.layered)}};
}

}  // namespace kvcache::tool
