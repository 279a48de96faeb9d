// `kvcache plan`: the seed's memory formula made useful. For each storage format, the installed
// plugins' too (scales counted) and for MHA / GQA / MQA: KV bytes for the batch and context, pages
// and last-page waste for the page size, and the largest batch that fits the memory left after the
// weights. A hybrid preset's local and global layers keep different tokens: each group's bytes too.
#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "kvcache/formats.hpp"
#include "kvcache/model_presets.hpp"
#include "kvcache/nearest_name.hpp"
#include "kvcache/quantizer.hpp"
#include "kvcache/registry.hpp"
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

// Layers that keep the same tokens: all of a model's, or a hybrid model's local and global ones.
struct Group {
  std::string name;  // "all", "local", "global"
  std::string mask;  // what its layers see
  std::uint32_t layers = 0;
  std::uint64_t tokens_kept = 0;  // per sequence
  std::uint64_t pages = 0;        // per sequence
};

std::uint64_t pages_for(std::uint64_t tokens, std::uint32_t page_size) {
  // Rounded up without tokens + page_size - 1, which wraps for a context near 2^64.
  return tokens / page_size + (tokens % page_size != 0 ? 1 : 0);
}

// A local layer keeps what any future query's window can reach: the last `window` tokens, which
// span at most window / page + 1 pages, since a page is freed once its last slot falls behind.
std::vector<Group> layer_groups(const ModelPreset& preset, std::uint32_t layers,
                                std::uint64_t tokens, std::uint32_t page_size) {
  const LocalLayers& local = preset.layers;
  const std::uint64_t all = pages_for(tokens, page_size);
  if (local.local == 0) return {{"all", "causal", layers, tokens, all}};
  std::uint32_t globals = 0;
  for (std::uint32_t layer = 0; layer < layers; ++layer) globals += local.global(layer) ? 1 : 0;
  const std::uint64_t window_pages = std::min(all, pages_for(local.window, page_size) + 1);
  return {{"local", "sliding-window " + std::to_string(local.window), layers - globals,
           std::min(tokens, window_pages * page_size), window_pages},
          {"global", "causal", globals, tokens, all}};
}

struct Row {
  std::string format;
  std::string attention;  // MHA, GQA, MQA
  std::uint32_t kv_heads;
  std::uint64_t bytes_per_token;      // a token in every layer, K and V, scales included
  std::uint64_t kv_bytes = 0;         // for the batch
  std::uint64_t pages = 0;            // for the batch, one page per group's layers
  std::uint64_t last_page_waste = 0;  // unused token slots in each sequence's last global page
  std::uint64_t max_batch = 0;
  std::uint64_t all_global_kv_bytes = 0;  // the same model with every layer global
  std::vector<std::pair<Group, std::uint64_t>> groups = {};  // and each one's KV bytes
};

std::string human(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) bytes /= 1024, ++u;
  return fmt::format("{:.1f} {}", bytes, units[u]);
}

nlohmann::json group_json(const std::vector<std::pair<Group, std::uint64_t>>& groups) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [g, bytes] : groups)
    out.push_back({{"name", g.name},
                   {"mask", g.mask},
                   {"layers", g.layers},
                   {"tokens_kept", g.tokens_kept},
                   {"pages", g.pages},
                   {"kv_bytes", bytes}});
  return out;
}

// The built-in formats, then those of the installed quantizer components.
std::vector<std::string> every_format(const Registry& registry) {
  std::vector<std::string> names = format_names();
  for (const std::string& name : registry.names(ComponentKind::quantizer))
    if (!is_built_in_format(name)) names.push_back(name);
  return names;
}

// What plan prints: the model, its layer groups, and a row per format and attention layout.
struct Plan {
  std::string model_name;
  ModelShape model;
  std::uint64_t tokens = 0, memory = 0, weights = 0;
  std::vector<Group> groups;
  std::vector<Row> rows;
};

Plan make_plan(const PlanFlags& f, const Registry& registry) {
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
  const std::vector<Group> groups = layer_groups(*preset, m.layers, tokens, f.page_size);
  const auto checked = [&](std::uint64_t a, std::uint64_t b, bool sum = false) {
    std::uint64_t result = 0;
    if (sum ? __builtin_add_overflow(a, b, &result) : __builtin_mul_overflow(a, b, &result))
      throw Error(Code::invalid_argument, "the cache for " + std::to_string(f.batch) + " x " +
                                              std::to_string(tokens) +
                                              " tokens exceeds 2^64 bytes");
    return result;
  };
  std::uint64_t global_pages = 0;  // per sequence, every layer kept as a global one
  for (const Group& g : groups) global_pages = std::max(global_pages, g.pages);

  std::vector<std::pair<std::string, std::uint32_t>> layouts = {{"MHA", m.q_heads}};
  if (m.kv_heads != m.q_heads && m.kv_heads != 1) layouts.emplace_back("GQA", m.kv_heads);
  if (m.q_heads != 1) layouts.emplace_back("MQA", 1);
  std::vector<Row> rows;
  for (const std::string& name : every_format(registry)) {
    TileLayout layout;
    try {
      layout = is_built_in_format(name)
                   ? format_layout(parse_format(name), m.head_dim, f.page_size)
                   : registry.create_quantizer(name, {})->describe(m.head_dim, f.page_size);
    } catch (const Error&) {
      continue;  // e.g. kivi-k's group does not divide this page size
    }
    for (const auto& [label, kv_heads] : layouts) {
      // A page of one layer: K and V tiles of every KV head.
      const std::uint64_t layer_page = std::uint64_t{kv_heads} * 2 * layout.tile_bytes;
      Row row{name, label, kv_heads, m.layers * layer_page / f.page_size};
      std::uint64_t per_sequence = 0;
      for (const Group& g : groups) {
        const std::uint64_t bytes = checked(g.pages, std::uint64_t{g.layers} * layer_page);
        row.groups.push_back({g, checked(bytes, f.batch)});
        per_sequence = checked(per_sequence, bytes, true);
        row.pages = checked(row.pages, checked(g.pages, f.batch), true);
      }
      row.kv_bytes = checked(per_sequence, f.batch);
      row.all_global_kv_bytes =
          checked(checked(global_pages, std::uint64_t{m.layers} * layer_page), f.batch);
      row.last_page_waste = global_pages * f.page_size - tokens;
      row.max_batch = (memory - weights) / per_sequence;
      rows.push_back(std::move(row));
    }
  }
  return {model_name, m, tokens, memory, weights, groups, std::move(rows)};
}

void print_json(const PlanFlags& f, const Plan& plan) {
  const ModelShape& m = plan.model;
  const std::uint64_t tokens = plan.tokens, memory = plan.memory, weights = plan.weights;
  const std::vector<Row>& rows = plan.rows;
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
                           {"max_batch", r.max_batch},
                           {"all_global_kv_bytes", r.all_global_kv_bytes},
                           {"groups", group_json(r.groups)}});
  std::cout << out.dump(2) << '\n';
}

void print_table(const PlanFlags& f, const Plan& plan) {
  const ModelShape& m = plan.model;
  const std::uint64_t tokens = plan.tokens, memory = plan.memory, weights = plan.weights;
  const std::vector<Group>& groups = plan.groups;
  const std::vector<Row>& rows = plan.rows;
  const std::string& model_name = plan.model_name;
  std::cout << fmt::format(
      "{}: {} layers, {} query heads, {} KV heads, head_dim {}; batch {} x {} tokens{}; page {}\n"
      "memory {} - weights {} = {} for the KV cache\n\n",
      model_name, m.layers, m.q_heads, m.kv_heads, m.head_dim, f.batch, f.context,
      f.window ? fmt::format(" (window keeps {})", tokens) : "", f.page_size, human(double(memory)),
      human(double(weights)), human(double(memory - weights)));
  const bool hybrid = groups.size() > 1;
  if (hybrid) {
    for (const Group& g : groups)
      std::cout << fmt::format("{} layers: {} ({}), each keeps {} tokens a sequence\n", g.name,
                               g.layers, g.mask, g.tokens_kept);
    std::cout << '\n';
  }
  std::cout << fmt::format("{:<16} {:<4} {:>4} {:>12} {:>12} {:>10} {:>10} {:>10}{}\n", "format",
                           "attn", "kv", "per token", "KV bytes", "pages", "last page", "max batch",
                           hybrid ? fmt::format(" {:>12}", "all global") : "");
  for (const Row& r : rows)
    std::cout << fmt::format(
        "{:<16} {:<4} {:>4} {:>12} {:>12} {:>10} {:>10} {:>10}{}\n", r.format, r.attention,
        r.kv_heads, human(double(r.bytes_per_token)), human(double(r.kv_bytes)), r.pages,
        fmt::format("{} free", r.last_page_waste), r.max_batch,
        hybrid ? fmt::format(" {:>12}", human(double(r.all_global_kv_bytes))) : "");
}

void run_plan(const PlanFlags& f, const Registry& registry) {
  const Plan plan = make_plan(f, registry);
  f.json ? print_json(f, plan) : print_table(f, plan);
}

}  // namespace

void add_plan_command(CLI::App& app, const Globals& globals) {
  auto f = std::make_shared<PlanFlags>();
  CLI::App* plan =
      app.add_subcommand("plan", "KV cache memory per format, attention layout and batch");
  examples(plan, {"kvcache plan --preset llama-3-70b --context 32768 --batch 16",
                  "kvcache plan --memory 24GiB --weights 16GiB --json",
                  "kvcache plan --preset mistral-7b --window 4096",
                  "kvcache plan --preset gemma-3-27b --context 32768"});
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
  plan->callback([&globals, f] {
    if (globals.checks_only) return;
    run_plan(*f, *Registry::load(selected_config(globals).plugins));
  });
}

}  // namespace kvcache::tool
