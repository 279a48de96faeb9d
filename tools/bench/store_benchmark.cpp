// Store benchmarks (run by hand, not by the tests):
//   append + quantize throughput per format, as GB/s of K/V input and as a fraction of the
//   machine's read bandwidth sampled just before and after in the same process (2 threads);
//   page alloc + free per second.
//
//   build/bin/kvcache-store-benchmark [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <chrono>
#include <random>
#include <vector>

#include "kvcache/formats.hpp"
#include "kvcache/numeric.hpp"
#include "kvcache/paging/page_pool.hpp"
#include "kvcache/registry.hpp"
#include "memory_bandwidth.hpp"

namespace {

using namespace kvcache;

// Read bandwidth sampled right before and right after a measurement: the machine is shared and
// its bandwidth drifts, so a kernel is only compared with what the machine gave meanwhile.
double read_gbps_now() {
  return bench::read_bandwidth_gbps(std::size_t{512} << 20, 2, 3);
}

const Registry& registry() {
  static const auto r = Registry::load(PluginSettings{});
  return *r;
}

// One layer of Llama-3-8B (8 KV heads x 128) per call: `tokens` rows of K and V appended to a
// fresh sequence, from float32 or float16 input. 65536 tokens make the input (512 MiB in float32)
// larger than any last-level cache, so the figure is about memory, not cache.
void append_quantize(benchmark::State& state, const std::string& format, bool half_input) {
  const auto tokens = static_cast<std::uint32_t>(state.range(0));
  constexpr std::uint32_t heads = 8, dim = 128;
  StoreSpec spec;
  spec.model = {1, 32, heads, dim};
  spec.page_size = 16;
  spec.capacity_bytes = std::uint64_t{tokens} * heads * dim * 4 * 2 * 2;
  spec.k_format = spec.v_format = format;
  const auto store = registry().create_backend("cpu-tbb")->create_store(spec);

  const std::size_t n = std::size_t{tokens} * heads * dim;
  std::vector<float> k(n), v(n);
  std::vector<std::uint16_t> kh(n), vh(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (std::size_t i = 0; i < n; ++i) {
    k[i] = normal(rng), v[i] = normal(rng);
    kh[i] = fp16_from_float(k[i]), vh[i] = fp16_from_float(v[i]);
  }
  std::int64_t shape[3] = {tokens, heads, dim};
  DLTensor kt{half_input ? static_cast<void*>(kh.data()) : k.data(),
              {kDLCPU, 0},
              3,
              {kDLFloat, static_cast<std::uint8_t>(half_input ? 16 : 32), 1},
              shape,
              nullptr,
              0};
  DLTensor vt = kt;
  vt.data = half_input ? static_cast<void*>(vh.data()) : v.data();
  const std::vector<std::uint32_t> counts{tokens};
  const double input_bytes = 2.0 * static_cast<double>(n) * (half_input ? 2 : 4);
  double seconds = 0.0;
  const double bandwidth_before = read_gbps_now();
  for (auto _ : state) {
    const SeqId id = store->create_sequence();
    store->reserve(std::vector<SeqId>{id}, counts);
    const auto start = std::chrono::steady_clock::now();
    store->append(0, std::vector<SeqId>{id}, counts, kt, vt);
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    state.SetIterationTime(elapsed);
    seconds += elapsed;
    store->release(id);
  }
  const double iterations = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(input_bytes * iterations));
  state.counters["GBps"] = input_bytes * iterations / seconds / 1e9;
  const double bandwidth = (bandwidth_before + read_gbps_now()) / 2;
  state.counters["read_bw_GBps"] = bandwidth;
  state.counters["fraction_of_read_bw"] = state.counters["GBps"] / bandwidth;
}

void register_append_benchmarks() {
  for (const std::string& f : format_names()) {
    for (const bool half : {false, true}) {
      benchmark::RegisterBenchmark(
          ("append_quantize/" + f + (half ? "/fp16_input" : "/fp32_input")).c_str(),
          [f, half](benchmark::State& s) { append_quantize(s, f, half); })
          ->Arg(65536)
          ->Iterations(8)
          ->Unit(benchmark::kMicrosecond)
          ->UseManualTime();
    }
  }
}

void page_alloc_free(benchmark::State& state) {
  paging::PagePool pool(1 << 16);
  std::vector<paging::PageId> held;
  held.reserve(64);
  for (auto _ : state) {
    for (int i = 0; i < 64; ++i) held.push_back(pool.allocate());
    for (paging::PageId p : held) pool.release(p, false);
    held.clear();
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * 64);  // one item = one allocate + one free
}
BENCHMARK(page_alloc_free);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  register_append_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
