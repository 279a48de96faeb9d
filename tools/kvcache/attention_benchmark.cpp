#include "attention_benchmark.hpp"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include "fma_peak.hpp"
#include "kvcache/formats.hpp"
#include "kvcache/host_tensor.hpp"
#include "kvcache/registry.hpp"
#include "kvcache/rope.hpp"
#include "kvcache/status.hpp"
#include "memory_bandwidth.hpp"

namespace kvcache::tool {
namespace {

// Positions in [0, tokens) inside any of the ranges.
std::uint64_t visible_tokens(std::vector<PositionRange> ranges, std::uint64_t tokens) {
  std::sort(ranges.begin(), ranges.end(),
            [](const PositionRange& a, const PositionRange& b) { return a.begin < b.begin; });
  std::uint64_t n = 0;
  Position covered = 0;
  for (const PositionRange& r : ranges) {
    const Position begin = std::clamp<Position>(std::max(r.begin, covered), 0, tokens);
    const Position end = std::clamp<Position>(r.end, 0, tokens);
    if (end > begin) n += static_cast<std::uint64_t>(end - begin);
    covered = std::max(covered, end);
  }
  return n;
}

// The last-level cache that KV must outgrow: for a host backend the L3 that CPU 0 shares (sysfs;
// the C library's figure counts every L3 of the package, 8 times too much on an 8-CCD EPYC), else
// the C library's, else 32 MiB; for a GPU backend 64 MiB, above the L2 of the largest GPUs (50 MB
// on the H100 and H200), which no runtime call here reports.
std::uint64_t last_level_cache(const Registry& registry, const std::string& backend) {
  const ComponentInfo* info = registry.find(ComponentKind::backend, backend);
  if (info != nullptr && info->capabilities.device_kind != "cpu") return std::uint64_t{64} << 20;
  std::uint64_t size = 0;
  char unit = 0;
  if (std::ifstream sysfs("/sys/devices/system/cpu/cpu0/cache/index3/size"); sysfs >> size) {
    sysfs >> unit;  // "32768K"
    if (size > 0) return size << (unit == 'K' ? 10 : unit == 'M' ? 20 : 0);
  }
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? static_cast<std::uint64_t>(l3) : std::uint64_t{32} << 20;
}

// A store of one backend filled with `o.batch` sequences of `o.tokens` random rows, in enough
// layers that they outgrow the last-level cache (one with `o.hot`).
struct FilledStore {
  StoreSpec spec;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<CacheStore> store;
  std::unique_ptr<Attention> attention;
  std::vector<SeqId> ids;
  std::uint64_t tile_k = 0, tile_v = 0, cache = 0;
};

FilledStore fill_store(const Registry& registry, const AttentionBenchOptions& o,
                       std::mt19937& rng) {
  FilledStore f;
  StoreSpec& spec = f.spec;
  spec.model = {1, o.q_heads, o.kv_heads, o.head_dim};
  spec.page_size = o.page_size;
  spec.k_format = o.k_format;
  spec.v_format = o.v_format;
  spec.k_options = o.k_options;
  spec.v_options = o.v_options;
  spec.prefix_caching = false;
  spec = with_codecs(spec, registry);  // a format from outside runs through its own codec
  f.tile_k = store_format(spec, false).layout.tile_bytes;
  f.tile_v = store_format(spec, true).layout.tile_bytes;
  const std::uint64_t pages = (o.tokens + o.page_size - 1) / o.page_size * o.batch + 1;
  const std::uint64_t layer_bytes = pages * o.kv_heads * (f.tile_k + f.tile_v);
  f.cache = last_level_cache(registry, o.backend);
  spec.model.layers = o.hot ? 1
                            : static_cast<std::uint32_t>(std::max<std::uint64_t>(
                                  1, (8 * f.cache + layer_bytes - 1) / layer_bytes));
  spec.capacity_bytes = pages * page_cost(spec);
  f.backend = registry.create_backend(o.backend);
  f.store = f.backend->create_store(spec);
  f.attention = f.backend->create_attention();

  // Fill every sequence, a chunk at a time, from one random buffer (contents do not change the
  // amount of work, only realistic values matter for quantization).
  for (std::uint32_t i = 0; i < o.batch; ++i) f.ids.push_back(f.store->create_sequence());
  const std::uint64_t chunk = std::min<std::uint64_t>(o.tokens, 2048);
  std::vector<float> rows(chunk * o.batch * o.kv_heads * o.head_dim);
  std::normal_distribution<float> normal;
  for (float& x : rows) x = normal(rng);
  for (std::uint64_t done = 0; done < o.tokens; done += chunk) {
    const auto n = static_cast<std::uint32_t>(std::min(chunk, o.tokens - done));
    const std::vector<std::uint32_t> counts(o.batch, n);
    f.store->reserve(f.ids, counts);
    std::int64_t shape[3] = {static_cast<std::int64_t>(n) * o.batch, o.kv_heads, o.head_dim};
    const DLTensor t = host_tensor(rows.data(), shape);
    for (std::uint32_t layer = 0; layer < spec.model.layers; ++layer)
      f.store->append(layer, f.ids, counts, t, t);
  }

  return f;
}

// The last `o.queries` positions of each sequence, and what the mask lets them see.
struct MaskedQueries {
  std::uint64_t queries = 0;
  std::uint32_t max_ranges = 1;
  std::vector<PositionRange> ranges;
  std::vector<std::uint32_t> range_counts;
  RotationTable rotations;
  std::uint64_t visible = 0, keys_seen = 0;  // per sequence, per query
};

MaskedQueries mask_queries(const Registry& registry, const AttentionBenchOptions& o) {
  MaskedQueries m;
  // The last `queries` positions of each sequence query, with the mask's ranges.
  if (o.queries == 0 || o.queries > o.tokens)
    throw Error(Code::invalid_argument, "queries must be between 1 and the cached tokens (" +
                                            std::to_string(o.tokens) + ")");
  m.queries = std::uint64_t{o.batch} * o.queries;
  const auto mask = registry.create_mask(o.mask.name, o.mask.options);
  const std::uint32_t max_ranges = m.max_ranges = mask->describe().max_ranges;
  std::vector<PositionRange>& ranges = m.ranges;
  std::vector<std::uint32_t>& range_counts = m.range_counts;
  ranges.resize(m.queries * max_ranges);
  range_counts.resize(m.queries);
  std::vector<Position> positions;
  for (std::uint32_t i = 0; i < o.batch; ++i)
    for (std::uint32_t j = 0; j < o.queries; ++j)
      positions.push_back(static_cast<Position>(o.tokens - o.queries + j));
  mask->visible(positions, ranges, range_counts);
  // A mask that places queries within the cache: the rotations the Cache would make, of Llama
  // 3's RoPE (the angles do not change the work).
  if (mask->describe().positions_in_cache) {
    const Rope rope{500000.0, 0, RopeStyle::neox, {}};
    std::vector<Position> at(ranges.size());
    mask->query_positions(positions, ranges, range_counts, at);
    m.rotations = rotation_table(rope, rope_frequencies(rope, o.head_dim), positions, range_counts,
                                 max_ranges, at);
  }
  for (std::uint32_t i = 0; i < o.batch; ++i) {
    std::vector<PositionRange> of_sequence;
    for (std::uint64_t query = std::uint64_t{i} * o.queries; query < (i + 1ull) * o.queries;
         ++query) {
      const auto first = ranges.begin() + static_cast<std::ptrdiff_t>(query * max_ranges);
      const std::vector<PositionRange> mine(first, first + range_counts[query]);
      m.keys_seen += visible_tokens(mine, o.tokens);
      of_sequence.insert(of_sequence.end(), mine.begin(), mine.end());
    }
    m.visible += visible_tokens(of_sequence, o.tokens);
  }

  return m;
}

}  // namespace

AttentionBenchResult run_attention_benchmark(const Registry& registry,
                                             const AttentionBenchOptions& o) {
  const int threads = o.threads > 0 ? o.threads : tbb::this_task_arena::max_concurrency();
  const tbb::global_control parallelism(tbb::global_control::max_allowed_parallelism,
                                        static_cast<std::size_t>(threads));
  std::mt19937 rng(42);
  std::normal_distribution<float> normal;
  const FilledStore f = fill_store(registry, o, rng);
  const MaskedQueries m = mask_queries(registry, o);
  const StoreSpec& spec = f.spec;
  Backend& backend = *f.backend;
  CacheStore& store = *f.store;
  Attention& attention = *f.attention;
  const std::vector<SeqId>& ids = f.ids;
  const std::uint64_t queries = m.queries, tile_k = f.tile_k, tile_v = f.tile_v, cache = f.cache;
  const std::uint64_t visible = m.visible, keys_seen = m.keys_seen;
  const std::vector<PositionRange>& ranges = m.ranges;
  const std::vector<std::uint32_t>& range_counts = m.range_counts;
  const std::uint32_t max_ranges = m.max_ranges;
  const RotationTable& rotations = m.rotations;

  std::vector<float> q(queries * o.q_heads * o.head_dim), out(q.size());
  for (float& x : q) x = normal(rng);
  std::int64_t q_shape[3] = {static_cast<std::int64_t>(queries), o.q_heads, o.head_dim};
  DLTensor qt = host_tensor(q.data(), q_shape);
  DLTensor ot = qt;
  ot.data = out.data();
  const std::vector<std::uint32_t> query_counts(o.batch, o.queries);
  // Calls run on one step's plan, as an engine's layers do: the plan (positions, slot spans, work
  // items and, on a GPU, their upload) is made once and timed apart.
  StepRequest step;
  step.sequences = ids;
  if (o.queries > 1) step.query_counts = query_counts;
  step.visible = {ranges, range_counts, max_ranges, rotations.view()};
  std::vector<double> plan_times;
  std::unique_ptr<StepPlan> plan;
  for (int i = 0; i < 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    plan = attention.plan(store, step);
    plan_times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::uint64_t turn = 0;
  const auto call = [&] {
    attention.run(store, *plan, static_cast<std::uint32_t>(turn++ % spec.model.layers), qt, ot);
  };

  AttentionBenchResult result;
  result.threads = threads;
  result.layers = spec.model.layers;
  result.cache_bytes = cache;
  if (const std::vector<DeviceInfo> devices = backend.devices(); !devices.empty())
    result.device = devices.front().name;
  result.kv_bytes = visible * o.kv_heads * (tile_k + tile_v) / o.page_size;
  // The bandwidth of the memory the KV lives in: the device's own measure (a copy within device
  // memory) for a GPU backend, else the host's read bandwidth.
  const auto read_gbps = [&] {
    const std::uint64_t probe = std::uint64_t{512} << 20;
    if (const std::optional<double> device = backend.memory_bandwidth_gbps(probe)) {
      result.bandwidth_probe = "device copy";
      return *device;
    }
    result.bandwidth_probe = "host read";
    return bench::read_bandwidth_gbps(probe, threads, 3);
  };
  const double bandwidth_before = read_gbps();
  for (int i = 0; i < 2; ++i) call();  // warm-up
  std::vector<double> times;
  double total = 0.0;
  while (total < o.min_seconds || times.size() < 5) {
    const auto start = std::chrono::steady_clock::now();
    call();
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    total += times.back();
  }
  result.read_bandwidth_gbps = (bandwidth_before + read_gbps()) / 2;
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  result.seconds = times[times.size() / 2];
  std::nth_element(plan_times.begin(), plan_times.begin() + 2, plan_times.end());
  result.plan_seconds = plan_times[2];
  result.calls = times.size();
  result.gbps = static_cast<double>(result.kv_bytes) / result.seconds / 1e9;
  result.bandwidth_fraction = result.gbps / result.read_bandwidth_gbps;
  result.tokens_per_second = static_cast<double>(queries) / result.seconds;
  result.gflops =
      4.0 * o.q_heads * o.head_dim * static_cast<double>(keys_seen) / result.seconds / 1e9;
  // On the host, the arithmetic roof beside the memory one: where the reads are a small fraction
  // of the bandwidth, this says whether the multiply-adds are what bounds the call.
  if (result.bandwidth_probe == "host read") {
    result.fma_peak_gflops = bench::fma_peak_gflops(threads);
    if (result.fma_peak_gflops > 0.0) result.flop_fraction = result.gflops / result.fma_peak_gflops;
  }
  return result;
}

nlohmann::json to_json(const AttentionBenchOptions& o, const AttentionBenchResult& r) {
  return {{"backend", o.backend},
          {"device", r.device},
          {"k_format", o.k_format},
          {"v_format", o.v_format},
          {"k_options", o.k_options},
          {"v_options", o.v_options},
          {"tokens", o.tokens},
          {"batch", o.batch},
          {"queries", o.queries},
          {"q_heads", o.q_heads},
          {"kv_heads", o.kv_heads},
          {"head_dim", o.head_dim},
          {"page_size", o.page_size},
          {"mask", o.mask.name},
          {"mask_options", o.mask.options},
          {"threads", r.threads},
          {"kv_bytes", r.kv_bytes},
          {"seconds", r.seconds},
          {"plan_seconds", r.plan_seconds},
          {"calls", r.calls},
          {"gbps", r.gbps},
          {"read_bandwidth_gbps", r.read_bandwidth_gbps},
          {"bandwidth_probe", r.bandwidth_probe},
          {"bandwidth_fraction", r.bandwidth_fraction},
          {"tokens_per_second", r.tokens_per_second},
          {"gflops", r.gflops},
          {"fma_peak_gflops", r.fma_peak_gflops},
          {"flop_fraction", r.flop_fraction},
          {"hot", o.hot},
          {"layers", r.layers},
          {"last_level_cache_bytes", r.cache_bytes}};
}

}  // namespace kvcache::tool
