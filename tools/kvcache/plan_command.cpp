// `kvcache plan`: the seed's memory formula made useful. For each storage format (scales
// counted) and for MHA / GQA / MQA: KV bytes for the batch and context, pages and last-page
// waste for the page size, and the largest batch that fits the memory left after the weights.
#include <iostream>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "kvcache/formats.hpp"
#include "kvcache/model_presets.hpp"
#include "kvcache/nearest_name.hpp"
#include "validators.hpp"

namespace kvcache::tool {
namespace {

std::string preset_names() {
  std::string names;
  for (const ModelPreset& p : model_presets()) names += (names.empty() ? "" : ", ") + p.name;
  return names;
}

struct PlanFlags {
  std::string preset = "llama-3-8b";
  std::optional<std::uint32_t> layers, q_heads, kv_heads, head_dim;
  std::uint64_t batch = 1;
  std::uint64_t context = 4096;
  std::uint32_t page_size = 16;
  std::optional<std::uint64_t> window;
  std::string memory = "80GiB";
  std::string weights = "0";
  bool json = false;
};

struct Row {
  std::string format;
  std::string attention;  // MHA, GQA, MQA
  std::uint32_t kv_heads;
  std::uint64_t bytes_per_token;  // all layers, K and V, scales included
  std::uint64_t kv_bytes;         // for the batch
  std::uint64_t pages;            // for the batch
  std::uint64_t last_page_waste;  // unused token slots in each sequence's last page
  std::uint64_t max_batch;
};

std::string human(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) bytes /= 1024, ++u;
  return fmt::format("{:.1f} {}", bytes, units[u]);
}

void run_plan(const PlanFlags& f) {
  const ModelPreset* preset = find_model_preset(f.preset);
  if (preset == nullptr) {
    std::vector<std::string> names;
    for (const ModelPreset& p : model_presets()) names.push_back(p.name);
    throw Error(Code::invalid_argument, "unknown preset '" + f.preset + "'" +
                                            did_you_mean(f.preset, names) +
                                            "; presets: " + preset_names() +
                                            ", or give --layers --q-heads --kv-heads --head-dim");
  }
  ModelShape m = preset->shape;
  const bool overridden = f.layers || f.q_heads || f.kv_heads || f.head_dim;
  const std::string model_name = overridden ? f.preset + " (overridden)" : f.preset;
  m.layers = f.layers.value_or(m.layers);
  m.q_heads = f.q_heads.value_or(m.q_heads);
  m.kv_heads = f.kv_heads.value_or(m.kv_heads);
  m.head_dim = f.head_dim.value_or(m.head_dim);
  if (m.kv_heads == 0 || m.q_heads % m.kv_heads != 0)
    throw Error(Code::invalid_argument, "q-heads must be a multiple of kv-heads");
  const std::uint64_t memory = parse_size(f.memory), weights = parse_size(f.weights);
  if (weights >= memory)
    throw Error(Code::invalid_argument, "--weights leaves no memory for the cache");
  const std::uint64_t tokens = f.window ? std::min(f.context, *f.window) : f.context;
  // Rounded up without tokens + page_size - 1, which wraps for a context near 2^64 (and then
  // divided by zero below).
  const std::uint64_t pages_per_sequence =
      tokens / f.page_size + (tokens % f.page_size != 0 ? 1 : 0);

  std::vector<std::pair<std::string, std::uint32_t>> layouts = {{"MHA", m.q_heads}};
  if (m.kv_heads != m.q_heads && m.kv_heads != 1) layouts.emplace_back("GQA", m.kv_heads);
  if (m.q_heads != 1) layouts.emplace_back("MQA", 1);
  std::vector<Row> rows;
  for (const std::string& name : format_names()) {
    StorageFormat layout;
    try {
      layout = format_layout(parse_format(name), m.head_dim, f.page_size);
    } catch (const Error&) {
      continue;  // e.g. kivi-k's group does not divide this page size
    }
    for (const auto& [label, kv_heads] : layouts) {
      const std::uint64_t page_bytes = std::uint64_t{m.layers} * kv_heads * 2 * layout.tile_bytes;
      std::uint64_t per_sequence = 0, total = 0, pages = 0;
      if (__builtin_mul_overflow(pages_per_sequence, page_bytes, &per_sequence) ||
          __builtin_mul_overflow(per_sequence, f.batch, &total) ||
          __builtin_mul_overflow(pages_per_sequence, f.batch, &pages))
        throw Error(Code::invalid_argument, "the cache for " + std::to_string(f.batch) + " x " +
                                                std::to_string(tokens) +
                                                " tokens exceeds 2^64 bytes");
      rows.push_back({name, label, kv_heads, page_bytes / f.page_size, total, pages,
                      pages_per_sequence * f.page_size - tokens,
                      (memory - weights) / per_sequence});
    }
  }
  if (f.json) {
    nlohmann::json out = {{"model",
                           {{"layers", m.layers},
                            {"q_heads", m.q_heads},
                            {"kv_heads", m.kv_heads},
                            {"head_dim", m.head_dim}}},
                          {"batch", f.batch},
                          {"context", f.context},
                          {"tokens_kept", tokens},
                          {"page_size", f.page_size},
                          {"memory_bytes", memory},
                          {"weights_bytes", weights},
                          {"rows", nlohmann::json::array()}};
    for (const Row& r : rows)
      out["rows"].push_back({{"format", r.format},
                             {"attention", r.attention},
                             {"kv_heads", r.kv_heads},
                             {"bytes_per_token", r.bytes_per_token},
                             {"kv_bytes", r.kv_bytes},
                             {"pages", r.pages},
                             {"last_page_waste_tokens", r.last_page_waste},
                             {"max_batch", r.max_batch}});
    std::cout << out.dump(2) << '\n';
    return;
  }
  std::cout << fmt::format(
      "{}: {} layers, {} query heads, {} KV heads, head_dim {}; batch {} x {} tokens{}; page {}\n"
      "memory {} - weights {} = {} for the KV cache\n\n",
      model_name, m.layers, m.q_heads, m.kv_heads, m.head_dim, f.batch, f.context,
      f.window ? fmt::format(" (window keeps {})", tokens) : "", f.page_size, human(double(memory)),
      human(double(weights)), human(double(memory - weights)));
  std::cout << fmt::format("{:<16} {:<4} {:>4} {:>12} {:>12} {:>10} {:>10} {:>10}\n", "format",
                           "attn", "kv", "per token", "KV bytes", "pages", "last page",
                           "max batch");
  for (const Row& r : rows)
    std::cout << fmt::format("{:<16} {:<4} {:>4} {:>12} {:>12} {:>10} {:>10} {:>10}\n", r.format,
                             r.attention, r.kv_heads, human(double(r.bytes_per_token)),
                             human(double(r.kv_bytes)), r.pages,
                             fmt::format("{} free", r.last_page_waste), r.max_batch);
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto f = std::make_shared<PlanFlags>();
  CLI::App* plan =
      app.add_subcommand("plan", "KV cache memory per format, attention layout and batch");
  examples(plan, {"kvcache plan --preset llama-3-70b --context 32768 --batch 16",
                  "kvcache plan --memory 24GiB --weights 16GiB --json",
                  "kvcache plan --preset mistral-7b --window 4096"});
  plan->add_option("--preset", f->preset, preset_names())->capture_default_str();
  plan->add_option("--layers", f->layers, "override the preset's layers")
      ->check(positive(f->layers));
  plan->add_option("--q-heads", f->q_heads, "override the preset's query heads")
      ->check(positive(f->q_heads));
  plan->add_option("--kv-heads", f->kv_heads, "override the preset's KV heads")
      ->check(positive(f->kv_heads));
  plan->add_option("--head-dim", f->head_dim, "override the preset's head dimension")
      ->check(positive(f->head_dim));
  plan->add_option("--batch", f->batch, "sequences")
      ->capture_default_str()
      ->check(positive(f->batch));
  plan->add_option("--context", f->context, "tokens per sequence")
      ->capture_default_str()
      ->check(positive(f->context));
  plan->add_option("--page-size", f->page_size, "tokens per page (at most 1024)")
      ->capture_default_str()
      ->check(whole_number(1, 1024));
  plan->add_option("--window", f->window, "keep only this many tokens (sliding window)")
      ->check(positive(f->window));
  plan->add_option("--memory", f->memory, "device memory, e.g. 80GiB")->capture_default_str();
  plan->add_option("--weights", f->weights, "memory taken by the weights, e.g. 16GiB")
      ->capture_default_str();
  plan->add_flag("--json", f->json, "print one JSON object");
  plan->callback([f] { run_plan(*f); });
}

}  // namespace kvcache::tool
