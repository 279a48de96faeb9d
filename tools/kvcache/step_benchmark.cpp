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
};

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
  command.add_option("--steps", o.steps, "measured steps of each kind")
      ->capture_default_str()
      ->check(positive(o.steps));
}

StepBenchResult run_step_benchmark(std::shared_ptr<const Registry> registry,
                                   const StepBenchOptions& o, TensorMemory* memory) {
  if (o.batch == 0 || o.layers == 0 || o.steps == 0 || o.tokens == 0)
    throw Error(Code::invalid_argument, "bench step: batch, layers, tokens and steps must be > 0");
  Config config = parse_config(
      fmt::format("model: {{layers: {}, q_heads: {}, kv_heads: {}, head_dim: {}}}\n"
                  "backend: [{}]\nformat: {}\nmask: causal\neviction: none\n"
                  "cache: {{page_size: {}, prefix_caching: false}}\n",
                  o.layers, o.q_heads, o.kv_heads, o.head_dim, o.backend, o.format, o.page_size),
      "<bench step>", {});
  // Room for every sequence's tokens and the measured steps, a page of slack each.
  const StoreSpec spec = store_spec(config, *registry);
  const std::uint64_t per_sequence = o.tokens + 2ull * o.steps + 2;
  config.cache.capacity_bytes =
      ((per_sequence + o.page_size - 1) / o.page_size + 1) * o.batch * page_cost(spec);
  const auto cache = Cache::open(config, registry);
  const ModelShape& m = cache->model();

  std::vector<SeqId> ids;
  for (std::uint32_t i = 0; i < o.batch; ++i) ids.push_back(cache->add_sequence());
  // The cached tokens, a few sequences at a time (so the input stays small), every layer from one
  // random buffer: the contents do not change the work.
  std::mt19937 rng(42);
  std::normal_distribution<float> normal;
  const std::uint64_t chunk = std::max<std::uint64_t>(1, (std::uint64_t{1} << 22) / o.tokens);
  std::vector<float> rows(std::min<std::uint64_t>(chunk, o.batch) * o.tokens * m.kv_heads *
                          m.head_dim);
  for (float& x : rows) x = normal(rng);
  for (std::uint64_t first = 0; first < o.batch; first += chunk) {
    const std::uint64_t n = std::min<std::uint64_t>(chunk, o.batch - first);
    const std::vector<SeqId> part(ids.begin() + static_cast<std::ptrdiff_t>(first),
                                  ids.begin() + static_cast<std::ptrdiff_t>(first + n));
    const std::vector<std::uint32_t> counts(n, static_cast<std::uint32_t>(o.tokens));
    Step fill = cache->begin_step(part, counts);
    const Tensor t = Tensor::host(
        rows.data(), {static_cast<std::int64_t>(n * o.tokens), m.kv_heads, m.head_dim});
    for (std::uint32_t layer = 0; layer < m.layers; ++layer) fill.append(layer, t, t);
    (void)fill.finish();
  }

  const auto b = static_cast<std::int64_t>(o.batch);
  std::vector<float> kv(o.batch * m.kv_heads * m.head_dim), q(o.batch * m.q_heads * m.head_dim),
      out(q.size());
  for (float& x : kv) x = normal(rng);
  for (float& x : q) x = normal(rng);
  // In the memory asked for, filled once (the values do not change the work).
  const auto place = [&](std::vector<float>& v, std::initializer_list<std::int64_t> shape) {
    if (memory == nullptr) return Tensor::host(v.data(), shape);
    return Tensor(memory->copy_of(v.data(), v.size() * sizeof(float)), {kDLFloat, 32, 1},
                  memory->device(), shape);
  };
  const Tensor kvt = place(kv, {b, m.kv_heads, m.head_dim});
  const Tensor qt = place(q, {b, m.q_heads, m.head_dim});
  Tensor ot = place(out, {b, m.q_heads, m.head_dim});
  const std::vector<std::uint32_t> ones(o.batch, 1);

  const auto planned_step = [&](Samples& s) {
    const auto start = Clock::now();
    double attention = 0.0, append = 0.0;
    Step step = cache->begin_step(ids, ones);
    for (std::uint32_t layer = 0; layer < m.layers; ++layer) {
      const auto a = Clock::now();
      step.append(layer, kvt, kvt);
      const auto d = Clock::now();
      append += std::chrono::duration<double>(d - a).count();
      step.decode(layer, qt, ot);
      attention += seconds_since(d);
    }
    (void)step.finish();
    s.total.push_back(seconds_since(start));
    s.attention.push_back(attention);
    s.append.push_back(append);
  };
  const auto layered_step = [&](Samples& s) {
    const auto start = Clock::now();
    double attention = 0.0, append = 0.0;
    (void)cache->reserve(ids, ones);
    for (std::uint32_t layer = 0; layer < m.layers; ++layer) {
      const auto a = Clock::now();
      cache->append(layer, ids, ones, kvt, kvt);
      const auto d = Clock::now();
      append += std::chrono::duration<double>(d - a).count();
      cache->decode(layer, ids, qt, ot);
      attention += seconds_since(d);
    }
    (void)cache->end_step();
    s.total.push_back(seconds_since(start));
    s.attention.push_back(attention);
    s.append.push_back(append);
  };
  Samples planned, layered, warm;
  planned_step(warm);
  layered_step(warm);
  for (std::uint32_t i = 0; i < o.steps; ++i) {  // taking turns, so the host's noise hits both
    planned_step(planned);
    layered_step(layered);
  }

  StepBenchResult r;
  if (memory != nullptr) r.tensors = memory->name();
  r.attention_kernels = median(planned.attention);
  const auto times = [&](const Samples& s) {
    StepTimes t{median(s.total), median(s.attention), median(s.append), 0.0};
    t.outside = t.total - t.append - r.attention_kernels;
    return t;
  };
  r.planned = times(planned);
  r.layered = times(layered);
  const StoreInfo info = cache->store().info();
  const std::uint64_t slot_bytes =
      (info.k_format.tile_bytes + info.v_format.tile_bytes) / o.page_size;
  // At the median step: the cached tokens, two warm-up steps and half the measured ones.
  r.kv_bytes = o.batch * (o.tokens + 2 + o.steps) * m.kv_heads * slot_bytes * m.layers;
  return r;
}

nlohmann::json to_json(const StepBenchOptions& o, const StepBenchResult& r) {
  const auto times = [](const StepTimes& t) {
    return nlohmann::json{{"step_seconds", t.total},
                          {"attention_seconds", t.attention},
                          {"append_seconds", t.append},
                          {"outside_seconds", t.outside},
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
          {"attention_kernel_seconds", r.attention_kernels},
          {"kv_bytes", r.kv_bytes},
          {"planned", times(r.planned)},
          {"per_layer", times(r.layered)}};
}

}  // namespace kvcache::tool
