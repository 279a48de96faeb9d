// The CPU attention kernels alone (run by hand, not by the tests): one thread adds the same
// `--tokens` keys and values of one KV head (held in cache when they fit) to a softmax state
// through BlockAttention, for each storage format in turn, over many rounds, and prints each
// format's best time per token and its rate against fp16's. Memory, threads and the store stay out
// of the way, so a kernel change can be weighed on a machine too noisy for whole calls
// (`kvcache bench attention` measures those).
//
// With more tokens than the caches hold and --ahead, it shows the kernels fed from memory.
//
//   build/bin/kvcache-kernel-benchmark [--group 4] [--dim 128] [--tokens 256] [--rounds 2000]
//                                      [--ahead 0] [--format int4-group ...]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/block16.hpp"
#include "kernels/block_attention.hpp"
#include "kernels/cpu_features.hpp"
#include "kvcache/formats.hpp"
#include "kvcache/numeric.hpp"

namespace {

using namespace kvcache;
using cpu::RowFormat;

struct Format {
  const char* name;  // as `kvcache bench attention --format` names it
  RowFormat rows;
  FormatSpec spec;
};

// Random rows of a kind: codes anywhere in their range (fp8 without its NaN codes), with
// plausible scales.
struct RowData {
  std::vector<std::uint8_t> codes, meta;
  // The rows from `first` on (of `tokens`), with the 16 codes rows from `next` on (if there are
  // any) to ask for into cache meanwhile, as a paged call asks for the tiles ahead.
  cpu::RowBlock block(RowFormat kind, std::uint32_t first, std::uint32_t next,
                      std::uint32_t tokens) const {
    const std::size_t row = codes.size() / tokens, row_meta = meta.size() / tokens;
    const auto* ahead = reinterpret_cast<const std::byte*>(codes.data());
    return {kind, codes.data() + first * row, meta.data() + first * row_meta,
            next < tokens ? ahead + next * row : nullptr,
            std::min<std::size_t>(16, tokens - std::min(next, tokens)) * row};
  }
};
RowData random_rows(const Format& f, std::uint32_t dim, std::uint32_t n, std::mt19937& rng) {
  const TileLayout layout = format_layout(f.spec, dim, 16);
  RowData r{std::vector<std::uint8_t>(layout.slot_code_bytes * n),
            std::vector<std::uint8_t>(layout.slot_meta_bytes * n)};
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> byte(0, 255);
  auto* halves = reinterpret_cast<std::uint16_t*>(r.codes.data());
  switch (f.rows) {
    case RowFormat::float16:
      for (std::size_t i = 0; i < r.codes.size() / 2; ++i) halves[i] = fp16_from_float(normal(rng));
      break;
    case RowFormat::bfloat16:
      for (std::size_t i = 0; i < r.codes.size() / 2; ++i) halves[i] = bf16_from_float(normal(rng));
      break;
    default:
      for (auto& c : r.codes)
        c = static_cast<std::uint8_t>(byte(rng) & (f.rows == RowFormat::fp8 ? 0x77 : 0xFF));
  }
  if (const std::uint32_t group = cpu::int4_group(f.rows); group != 0) {
    auto* params = reinterpret_cast<std::uint16_t*>(r.meta.data());
    for (std::size_t i = 0; i < std::size_t{n} * dim / group; ++i) {
      params[2 * i] = fp16_from_float(0.05f);
      params[2 * i + 1] = fp16_from_float(-0.4f);
    }
  } else if (layout.slot_meta_bytes > 0) {
    auto* scales = reinterpret_cast<float*>(r.meta.data());
    for (std::uint32_t i = 0; i < n; ++i) scales[i] = 0.01f;
  }
  return r;
}

// fp16 first: the others are timed against it.
std::vector<Format> benchmark_formats() {
  return {
      {"fp16", RowFormat::float16, parse_format("fp16")},
      {"bf16", RowFormat::bfloat16, parse_format("bf16")},
      {"fp8-e4m3", RowFormat::fp8, parse_format("fp8-e4m3")},
      {"int8-per-token", RowFormat::int8, parse_format("int8-per-token")},
      {"int4-group", RowFormat::int4_g32, parse_format("int4-group")},
      {"int4-group:group=64", RowFormat::int4_g64, parse_format("int4-group", {{"group", 64}})},
      {"int4-group:group=128", RowFormat::int4_g128, parse_format("int4-group", {{"group", 128}})}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The CPU attention kernels alone, against fp16"};
  std::uint32_t group = 4, dim = 128, tokens = 256, rounds = 2000, ahead = 0;
  app.add_option("--group", group, "query heads per KV head (1, 2, 4 or 8)")->capture_default_str();
  app.add_option("--dim", dim, "head dimension (64 or 128)")->capture_default_str();
  app.add_option("--tokens", tokens, "tokens of the KV head")->capture_default_str();
  app.add_option("--rounds", rounds, "rounds; each times every format once")->capture_default_str();
  app.add_option("--ahead", ahead,
                 "0: one call for all tokens; N: a call per block of 16 that asks for the rows N "
                 "blocks ahead into cache (as a paged call does; for rows that do not fit in "
                 "cache)")
      ->capture_default_str();
  const std::vector<Format> formats = benchmark_formats();
  std::vector<std::string> names, only;
  for (const Format& f : formats) names.emplace_back(f.name);
  app.add_option("--format", only,
                 "time only these formats besides fp16 (for a profile of their kernels); "
                 "default: all")
      ->check(CLI::IsMember(names));
  CLI11_PARSE(app, argc, argv);

  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> q(std::size_t{group} * dim);
  for (float& x : q) x = 0.1f * normal(rng);

  struct Run {
    const char* name;
    cpu::BlockAttention kernels;
    RowData k, v;
    cpu::QuantizedQuery q8;
    double best = 1e30;
  };
  std::vector<Run> runs;
  for (const Format& f : formats) {
    if (f.rows != RowFormat::float16 && !only.empty() &&
        std::find(only.begin(), only.end(), f.name) == only.end())
      continue;
    cpu::BlockAttention kernels(group, dim, f.rows, f.rows);
    if (kernels.keys() != f.rows || kernels.values() != f.rows) {
      std::printf("%s: not read in place by these kernels (%s); skipped\n", f.name,
                  cpu::kernel_family());
      continue;
    }
    runs.push_back({f.name, kernels, random_rows(f, dim, tokens, rng),
                    random_rows(f, dim, tokens, rng), kernels.quantize(q.data())});
  }
  std::vector<float> logits(std::size_t{group} * tokens);
  cpu::PendingValues pending;
  for (std::uint32_t round = 0; round < rounds; ++round)
    for (Run& r : runs) {
      cpu::SoftmaxState state(group, dim);
      const auto start = std::chrono::steady_clock::now();
      if (ahead == 0) {
        r.kernels(q.data(), &r.q8, r.k.block(r.kernels.keys(), 0, tokens, tokens),
                  r.v.block(r.kernels.values(), 0, tokens, tokens), tokens, state, pending,
                  logits.data());
      } else {
        for (std::uint32_t t = 0; t < tokens; t += 16) {
          const std::uint32_t n = std::min(16u, tokens - t), next = t + 16 * ahead;
          r.kernels(q.data(), &r.q8, r.k.block(r.kernels.keys(), t, next, tokens),
                    r.v.block(r.kernels.values(), t, next, tokens), n, state, pending,
                    logits.data());
        }
      }
      r.kernels.flush(pending);
      r.best = std::min(
          r.best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }

  std::printf("%s kernels, group %u, head_dim %u, %u tokens, %s, one thread; best of %u\n",
              cpu::kernel_family(), group, dim, tokens,
              ahead == 0 ? "one call" : "a call per block", rounds);
  std::printf("%-22s %12s %10s\n", "format", "ns/token", "vs fp16");
  const double fp16 = runs.empty() ? 0.0 : runs.front().best;
  for (std::size_t i = 0; i < runs.size(); ++i)
    std::printf("%-22s %12.2f %9.2fx\n", runs[i].name, runs[i].best * 1e9 / tokens,
                fp16 / runs[i].best);
}
