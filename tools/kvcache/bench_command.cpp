// `kvcache bench attention`: one layer of attention (decode, or a prefill chunk), as GB/s of K/V
// read and as a fraction of the machine's read bandwidth measured in the same run.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <utility>

#include <fmt/format.h>

#include "attention_benchmark.hpp"
#include "commands.hpp"
#include "format_spec.hpp"
#include "kvcache/registry.hpp"
#include "kvcache/remote/memory_byte_store.hpp"
#include "serving_simulation.hpp"
#include "step_benchmark.hpp"
#include "tier_benchmark.hpp"
#include "validators.hpp"

namespace kvcache::tool {

namespace {

// `kvcache bench step`: see step_benchmark.hpp.
void add_step_command(CLI::App& bench, const Globals& globals) {
  CLI::App* step = bench.add_subcommand(
      "step", "Decode steps through the Cache, planned per step and per layer: where time goes");
  examples(
      step,
      {"kvcache bench step", "kvcache bench step --format int8-per-token --batch 8 --tokens 1024",
       "kvcache bench step --backend cuda --q-heads 32 --kv-heads 8 --head-dim 128 --json",
       "kvcache bench step --layers 62 --q-heads 32 --kv-heads 16 --tokens 32768 --window 1024"});
  struct Flags {
    StepBenchOptions options;
    bool json = false;
  };
  auto f = std::make_shared<Flags>();
  StepBenchOptions& o = f->options;
  add_step_options(*step, o);
  step->add_flag("--json", f->json, "print one JSON object");
  step->callback([&globals, f] {
    if (globals.checks_only) return;
    const Config config = selected_config(globals);
    const StepBenchResult r = run_step_benchmark(Registry::load(config.plugins), f->options);
    if (f->json) {
      std::cout << to_json(f->options, r).dump() << '\n';
      return;
    }
    const StepBenchOptions& o = f->options;
    std::cout << fmt::format(
        "{} sequences x {} layers at {} tokens{}, {} on {}, tensors on the {}; medians of {} "
        "steps\n",
        r.sequences, o.layers, o.tokens,
        o.window > 0
            ? fmt::format(" (sliding over {}, every {}th layer global)", o.window, o.global_every)
            : "",
        o.format, o.backend, r.tensors, o.steps);
    std::cout << fmt::format("{:<22}{:>12}{:>14}{:>12}{:>14}{:>10}\n", "", "step ms",
                             "attention ms", "append ms", "outside ms", "outside");
    for (const auto& [name, t] :
         {std::pair{"planned once a step", r.planned}, std::pair{"planned every layer", r.layered}})
      std::cout << fmt::format("{:<22}{:>12.3f}{:>14.3f}{:>12.3f}{:>14.3f}{:>9.1f}%\n", name,
                               1e3 * t.total, 1e3 * t.attention, 1e3 * t.append, 1e3 * t.outside,
                               100 * t.outside / t.total);
    std::cout << fmt::format("attention kernels: {:.3f} ms a step ({:.1f} GB/s of KV)\n",
                             1e3 * r.attention_kernels,
                             static_cast<double>(r.kv_bytes) / r.attention_kernels / 1e9);
    std::cout << fmt::format("KV pages in use: {} bytes of a capacity of {}\n", r.used_bytes,
                             r.capacity_bytes);
  });
}

// The same requests on `count` replicas, one after the other, sharing prefix pages through the
// config's remote tier, or through an in-process space when it has none (one process standing in
// for a fleet: what replica 2 pulls, it would otherwise have prefilled).
nlohmann::json run_replicas(Config config, std::shared_ptr<const Registry> registry,
                            const SimulationOptions& o, std::uint32_t count) {
  std::shared_ptr<remote::MemorySpace> space;  // lives across the replicas
  if (!config.remote) {
    RemoteSettings shared;
    shared.transport.name = "memory";
    shared.endpoints = {"kvcache-bench-replicas"};
    shared.model = "kvcache bench (synthetic K/V)";
    config.remote = shared;
  }
  if (config.remote->transport.name == "memory")
    space = remote::MemorySpace::named(config.remote->endpoints.at(0));
  nlohmann::json replicas = nlohmann::json::array();
  for (std::uint32_t i = 0; i < count; ++i) {
    SimulationOptions quiet = o;
    quiet.progress = false;
    replicas.push_back(run_serving_simulation(config, registry, quiet));
  }
  return {{"replicas", replicas}};
}

void print_replicas(const nlohmann::json& r, bool json) {
  if (json) {
    std::cout << r.dump() << '\n';
    return;
  }
  int i = 0;
  for (const nlohmann::json& replica : r["replicas"]) {
    const nlohmann::json& tier = replica["remote"];
    std::cout << fmt::format(
        "replica {}: {:.0f} tokens/s; prefix cache {:.1f}% of prompt tokens reused; remote tier: "
        "{} pages pulled ({} prefill tokens), {} written, {} found there\n",
        ++i, replica["tokens_per_second"].get<double>(),
        100 * replica["prefix_hit_rate"].get<double>(), tier["pages_pulled"].get<std::uint64_t>(),
        tier["prefill_tokens_pulled"].get<std::uint64_t>(),
        tier["pages_written"].get<std::uint64_t>(), tier["pages_present"].get<std::uint64_t>());
  }
}

// `kvcache bench attention`'s report as text (the formats and mask as given).
void print_attention(const AttentionBenchOptions& o, const AttentionBenchResult& r,
                     const std::string& k_format, const std::string& v_format,
                     const std::string& mask) {
  std::cout << fmt::format(
      "backend {} on {}\n"
      "K {}, V {}, {} tokens x batch {}, {} queries each, {}/{} heads x {}, page {}, mask {}, {} "
      "threads\n"
      "KV read per call:   {:.2f} MB (scales included), {}\n"
      "time per call:      {:.3f} ms (median of {}, on a step's plan made in {:.3f} ms)\n"
      "attention:          {:.1f} GB/s = {:.2f} of memory bandwidth ({:.1f} GB/s, {}, measured "
      "in this run), {:.1f} GFLOP/s{}\n"
      "tokens/s:           {:.0f}\n",
      o.backend, r.device, k_format, v_format, o.tokens, o.batch, o.queries, o.q_heads, o.kv_heads,
      o.head_dim, o.page_size, mask, r.threads, r.kv_bytes / 1e6,
      o.hot ? std::string("one layer, read hot")
            : fmt::format("calls take turns over {} layers ({:.0f} MB of KV, last-level cache "
                          "{:.0f} MB)",
                          r.layers, r.layers * r.kv_bytes / 1e6, r.cache_bytes / 1e6),
      r.seconds * 1e3, r.calls, r.plan_seconds * 1e3, r.gbps, r.bandwidth_fraction,
      r.read_bandwidth_gbps, r.bandwidth_probe, r.gflops,
      r.fma_peak_gflops > 0.0 ? fmt::format(" = {:.2f} of the FMA peak ({:.0f} GFLOP/s, measured "
                                            "in this run)",
                                            r.flop_fraction, r.fma_peak_gflops)
                              : std::string(),
      r.tokens_per_second);
}

// `kvcache bench attention`: see attention_benchmark.hpp.
void add_attention_command(CLI::App& bench, const Globals& globals) {
  CLI::App* attention = bench.add_subcommand(
      "attention",
      "One layer of decode attention (or a prefill chunk), against the machine's read bandwidth");
  examples(attention,
           {"kvcache bench attention --format int4-group:group=64 --tokens 32768 --batch 8",
            "kvcache bench attention --k-format int8-per-token --v-format int4-group --json",
            "kvcache bench attention --queries 256 --mask sink-window:4:1024"});
  struct Flags {
    AttentionBenchOptions options;
    std::string format, k_format = "fp16", v_format = "fp16", mask = "causal";
    bool json = false;
  };
  auto f = std::make_shared<Flags>();
  AttentionBenchOptions& o = f->options;
  attention->add_option("--backend", o.backend, "backend component")->capture_default_str();
  attention->add_option("--format", f->format,
                        "storage format of K and V, with options as NAME:KEY=VALUE[,KEY=VALUE] "
                        "(e.g. int4-group:group=64)");
  attention->add_option("--k-format", f->k_format, "storage format of K (as --format)")
      ->capture_default_str();
  attention->add_option("--v-format", f->v_format, "storage format of V (as --format)")
      ->capture_default_str();
  attention->add_option("--tokens", o.tokens, "cached tokens per sequence")
      ->capture_default_str()
      ->check(positive(o.tokens));
  attention->add_option("--batch", o.batch, "sequences")
      ->capture_default_str()
      ->check(positive(o.batch));
  attention
      ->add_option("--queries", o.queries,
                   "query tokens per sequence: 1 is decode, more a prefill chunk (the last "
                   "cached tokens)")
      ->capture_default_str()
      ->check(positive(o.queries));
  attention->add_option("--q-heads", o.q_heads, "query heads")
      ->capture_default_str()
      ->check(positive(o.q_heads));
  attention->add_option("--kv-heads", o.kv_heads, "KV heads")
      ->capture_default_str()
      ->check(positive(o.kv_heads));
  attention->add_option("--head-dim", o.head_dim, "head dimension")
      ->capture_default_str()
      ->check(positive(o.head_dim));
  attention->add_option("--page-size", o.page_size, "tokens per page")
      ->capture_default_str()
      ->check(whole_number(1, 1024));
  attention
      ->add_option("--mask", f->mask,
                   "causal, sliding-window:W, sink-window:S:W[:cache], chunked:C (:cache: "
                   "positions within the cache, the query turned for the sinks by "
                   "Llama 3's RoPE)")
      ->capture_default_str();
  attention->add_option("--threads", o.threads, "worker threads (0: all)")->capture_default_str();
  attention->add_option("--min-seconds", o.min_seconds, "time to spend measuring")
      ->capture_default_str();
  attention->add_flag("--hot", o.hot,
                      "read one layer again and again (default: take turns over enough layers "
                      "that the KV read is 8x the last-level cache)");
  attention->add_flag("--json", f->json, "print one JSON object");
  attention->callback([&globals, f] {
    if (globals.checks_only) return;
    AttentionBenchOptions& o = f->options;
    if (!f->format.empty()) f->k_format = f->v_format = f->format;
    ComponentChoice k = parse_format_spec(f->k_format), v = parse_format_spec(f->v_format);
    o.k_format = std::move(k.name);
    o.k_options = std::move(k.options);
    o.v_format = std::move(v.name);
    o.v_options = std::move(v.options);
    o.mask = parse_mask_spec(f->mask);
    const Config config = selected_config(globals);
    const auto registry = Registry::load(config.plugins);
    const AttentionBenchResult r = run_attention_benchmark(*registry, o);
    if (f->json) {
      std::cout << to_json(o, r).dump() << '\n';
      return;
    }
    print_attention(o, r, f->k_format, f->v_format, f->mask);
  });
}

// The serving simulation's report as text.
void print_simulation(const nlohmann::json& r) {
  std::cout << fmt::format(
      "backend {}, K {}, V {}, eviction {}; {} layers computed of {}\n"
      "requests:           {} finished, {} rejected, {} preemptions\n"
      "throughput:         {:.0f} tokens/s ({} tokens in {:.2f} s)\n"
      "attention:          {:.1f} GB/s of KV read\n"
      "KV utilization:     {:.1f}% of allocated slots hold tokens; internal fragmentation "
      "{:.1f}%\n"
      "contiguous baseline: {:.1f}% (max-length reservation per request)\n"
      "prefix cache:       {:.1f}% of prompt tokens reused\n"
      "evictions:          {} ranges, {} tokens dropped\n"
      "peak KV memory:     {:.1f} MiB (whole model)\n"
      "quantization error: {:.2e} (mean |error| / mean |x|, K format)\n",
      r["backend"].get<std::string>(), r["k_format"].get<std::string>(),
      r["v_format"].get<std::string>(), r["eviction"].get<std::string>(),
      r["simulated_layers"].get<int>(), r["model_layers"].get<int>(), r["finished"].get<int>(),
      r["rejected"].get<int>(), r["preemptions"].get<int>(), r["tokens_per_second"].get<double>(),
      r["generated_tokens"].get<std::uint64_t>(), r["seconds"].get<double>(),
      r["attention_gbps"].get<double>(), 100 * r["kv_utilization"].get<double>(),
      100 * r["fragmentation"].get<double>(), 100 * r["baseline_utilization"].get<double>(),
      100 * r["prefix_hit_rate"].get<double>(), r["evictions"].get<int>(),
      r["evicted_tokens"].get<std::uint64_t>(), r["peak_kv_bytes"].get<double>() / (1 << 20),
      r["quant_error"].is_null() ? std::nan("") : r["quant_error"].get<double>());
  for (const auto& rejection : r["rejections"])
    std::cout << fmt::format("rejected request {}: {}\n", rejection["request"].get<int>(),
                             rejection["reason"].get<std::string>());
}

}  // namespace

void add_tier_command(CLI::App& bench, const Globals& globals) {
  CLI::App* tier = bench.add_subcommand(
      "tier",
      "The remote tier of the config's remote: section: writes, lookups, pulls, and "
      "pulling against recomputing");
  examples(tier, {"kvcache --config remote.yaml bench tier",
                  "kvcache --config remote.yaml bench tier --pages 256 --json"});
  struct Flags {
    TierBenchOptions options;
    bool json = false;
  };
  auto f = std::make_shared<Flags>();
  tier->add_option("--pages", f->options.pages, "the prompt's length in pages")
      ->capture_default_str()
      ->check(positive(f->options.pages));
  tier->add_option("--repeats", f->options.repeats, "of each lookup and pull")
      ->capture_default_str()
      ->check(positive(f->options.repeats));
  tier->add_flag("--json", f->json, "print one JSON object");
  tier->callback([&globals, f] {
    if (globals.checks_only) return;
    const Config config = selected_config(globals);
    const nlohmann::json r = run_tier_benchmark(config, Registry::load(config.plugins), f->options);
    if (f->json) {
      std::cout << r.dump() << '\n';
      return;
    }
    const nlohmann::json& w = r["write"];
    std::cout << fmt::format(
        "{} pages of {} tokens ({} bytes a value), K {}, V {}\n"
        "write:  {:.3f} GB/s ({} pages in {:.3f} s)\n",
        r["pages"].get<int>(), r["page_size"].get<int>(), w["value_bytes"].get<std::uint64_t>(),
        r["k_format"].get<std::string>(), r["v_format"].get<std::string>(), w["gbps"].get<double>(),
        w["pages"].get<std::uint64_t>(), w["seconds"].get<double>());
    for (const auto& l : r["lookups"])
      std::cout << fmt::format("lookup of {:>4} pages: p50 {:.0f} us, p99 {:.0f} us ({} found)\n",
                               l["pages"].get<int>(), l["p50_us"].get<double>(),
                               l["p99_us"].get<double>(), l["found_pages"].get<int>());
    for (const auto& l : r["lengths"])
      std::cout << fmt::format(
          "{:>5} pages: pull {:.2f} ms ({:.3f} GB/s; {:.2f} ms into a fresh host){}\n",
          l["pages"].get<int>(), l["pull_ms"].get<double>(), l["pull_gbps"].get<double>(),
          l["cold_pull_ms"].get<double>(),
          l.contains("recompute_ms")
              ? fmt::format(", recompute {:.2f} ms", l["recompute_ms"].get<double>())
              : std::string());
    const int from = r["break_even_pages"].get<int>();
    std::cout << (from > 0 ? fmt::format("pulling beats recomputing from {} pages\n", from)
                           : std::string("pulling beat recomputing at none of these lengths\n"));
    if (r.contains("dead_store")) {
      const nlohmann::json& d = r["dead_store"];
      std::string until;
      for (const auto& us : d["until_open_us"])
        until += fmt::format("{}{:.0f}", until.empty() ? "" : ", ", us.get<double>());
      std::cout << fmt::format(
          "a dead store: lookups of {} us until its breaker opens, then p50 {:.0f} us, p99 {:.0f} "
          "us\n",
          until, d["after_p50_us"].get<double>(), d["after_p99_us"].get<double>());
    }
  });
}

void add_bench_command(CLI::App& app, const Globals& globals) {
  CLI::App* bench = app.add_subcommand(
      "bench",
      "Serving simulation through the Cache (the main job); `bench attention`: one kernel");
  bench->require_subcommand(0, 1);
  examples(bench,
           {"kvcache bench", "kvcache bench --config my.yaml --requests 200 --json",
            "kvcache bench --replicas 2", "kvcache bench --trace requests.jsonl --chart run.svg"});
  struct SimFlags {
    SimulationOptions options;
    std::uint32_t replicas = 1;
    bool json = false;
  };
  auto sim = std::make_shared<SimFlags>();
  SimulationOptions& so = sim->options;
  bench->add_option("--requests", so.requests, "synthetic requests")
      ->capture_default_str()
      ->check(positive(so.requests));
  bench->add_option("--seed", so.seed, "seed of the synthetic requests")->capture_default_str();
  bench->add_option("--rate", so.arrival_rate, "arrivals per second")
      ->capture_default_str()
      ->check(positive(so.arrival_rate));
  bench
      ->add_option("--layers", so.simulated_layers,
                   "layers computed each step (memory is sized for all)")
      ->capture_default_str()
      ->check(positive(so.simulated_layers));
  bench->add_option("--max-batch", so.max_batch, "running sequences at most")
      ->capture_default_str()
      ->check(positive(so.max_batch));
  bench
      ->add_option("--baseline-max-len", so.baseline_max_len,
                   "tokens a contiguous allocator reserves per request")
      ->capture_default_str();
  bench
      ->add_option("--prefill-chunk", so.prefill_chunk,
                   "prompt tokens a step computes at most (0: the whole prompt in one step)")
      ->capture_default_str();
  bench->add_option("--trace", so.trace,
                    "JSONL: arrival, prompt_tokens, output_tokens, prefix_id (optional)");
  bench->add_option("--chart", so.chart, "write an SVG of memory use and throughput over time");
  bench
      ->add_option("--replicas", sim->replicas,
                   "replicas that run the same requests one after the other, sharing prefix "
                   "pages through the config's remote tier (an in-process one when it has none)")
      ->capture_default_str()
      ->check(CLI::Range(1, 8));
  bench->add_flag("--json", sim->json, "print one JSON object");
  bench->callback([&globals, bench, sim] {
    if (globals.checks_only) return;
    if (!bench->get_subcommands().empty()) return;  // `bench attention` or `bench step` ran
    SimulationOptions o = sim->options;
    o.progress = !sim->json;
    Config config = selected_config(globals);
    const auto registry = Registry::load(config.plugins);
    if (sim->replicas > 1) {
      print_replicas(run_replicas(config, registry, o, sim->replicas), sim->json);
      return;
    }
    const nlohmann::json r = run_serving_simulation(config, registry, o);
    if (sim->json) {
      std::cout << r.dump() << '\n';
      return;
    }
    print_simulation(r);
  });
  add_step_command(*bench, globals);
  add_tier_command(*bench, globals);
  add_attention_command(*bench, globals);
}

}  // namespace kvcache::tool
