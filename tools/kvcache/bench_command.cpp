// `kvcache bench attention`: one layer of decode attention, as GB/s of K/V read and as a
// fraction of the machine's read bandwidth measured in the same run.
#include <cstdio>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "attention_benchmark.hpp"
#include "commands.hpp"
#include "kvcache/registry.hpp"

namespace kvcache::tool {

void add_bench_command(CLI::App& app, const Globals& globals) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  CLI::App* attention = bench->add_subcommand(
      "attention", "One layer of decode attention, against the machine's read bandwidth");
  struct Flags {
    AttentionBenchOptions options;
    std::string format, mask = "causal";
    bool json = false;
  };
  auto f = std::make_shared<Flags>();
  AttentionBenchOptions& o = f->options;
  attention->add_option("--backend", o.backend, "backend component")->capture_default_str();
  attention->add_option("--format", f->format, "storage format of K and V");
  attention->add_option("--k-format", o.k_format, "storage format of K")->capture_default_str();
  attention->add_option("--v-format", o.v_format, "storage format of V")->capture_default_str();
  attention->add_option("--tokens", o.tokens, "cached tokens per sequence")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  attention->add_option("--batch", o.batch, "sequences, one query token each")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  attention->add_option("--q-heads", o.q_heads, "query heads")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  attention->add_option("--kv-heads", o.kv_heads, "KV heads")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  attention->add_option("--head-dim", o.head_dim, "head dimension")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  attention->add_option("--page-size", o.page_size, "tokens per page")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  attention->add_option("--mask", f->mask, "causal, sliding-window:W, sink-window:S:W, chunked:C")
      ->capture_default_str();
  attention->add_option("--threads", o.threads, "worker threads (0: all)")->capture_default_str();
  attention->add_option("--min-seconds", o.min_seconds, "time to spend measuring")
      ->capture_default_str();
  attention->add_flag("--json", f->json, "print one JSON object");
  attention->callback([&globals, f] {
    AttentionBenchOptions& o = f->options;
    if (!f->format.empty()) o.k_format = o.v_format = f->format;
    o.mask = parse_mask_spec(f->mask);
    const Config config = selected_config(globals);
    const auto registry = Registry::load(config.plugins);
    const AttentionBenchResult r = run_attention_benchmark(*registry, o);
    if (f->json) {
      std::cout << to_json(o, r).dump() << '\n';
      return;
    }
    std::cout << fmt::format(
        "backend {}, K {}, V {}, {} tokens x batch {}, {}/{} heads x {}, page {}, mask {}, {} "
        "threads\n"
        "KV read per call:   {:.2f} MB (scales included)\n"
        "time per call:      {:.3f} ms (median of {})\n"
        "attention:          {:.1f} GB/s = {:.2f} of read bandwidth ({:.1f} GB/s, measured in this "
        "run)\n"
        "tokens/s:           {:.0f}\n",
        o.backend, o.k_format, o.v_format, o.tokens, o.batch, o.q_heads, o.kv_heads, o.head_dim,
        o.page_size, f->mask, r.threads, r.kv_bytes / 1e6, r.seconds * 1e3, r.calls, r.gbps,
        r.bandwidth_fraction, r.read_bandwidth_gbps, r.tokens_per_second);
  });
}

}  // namespace kvcache::tool
