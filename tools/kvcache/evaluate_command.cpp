// `kvcache evaluate --kv FILE`: is a quantizer safe for *this* model? Real K/V tensors dumped
// from a model go through the real backend store in each format; we report the error of K and V
// and of attention outputs against float32, ranked.
//
// Expected input: a .safetensors file with K and V tensors [tokens, kv_heads, head_dim] paired
// by name: "k"/"v", or "<prefix>k"/"<prefix>v" such as "layers.0.k"/"layers.0.v", or
// "<prefix>key"/"<prefix>value"; or a .npy array [2, tokens, kv_heads, head_dim] (K, then V).
// Queries: --q Q.npy [q_heads, q_len, head_dim] (the last q_len positions), else random ones.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <random>

#include <fmt/format.h>

#include "commands.hpp"
#include "kvcache/cache.hpp"
#include "kvcache/formats.hpp"
#include "kvcache/host_tensor.hpp"
#include "kvcache/reference_attention.hpp"
#include "kvcache/registry.hpp"
#include "tensor_file.hpp"
#include "validators.hpp"

namespace kvcache::tool {
namespace {

struct KvPair {
  std::string name;
  std::vector<float> k, v;  // [tokens, kv_heads, head_dim]
  std::int64_t tokens = 0, kv_heads = 0, head_dim = 0;
};

std::vector<KvPair> read_pairs(const std::string& file) {
  const auto tensors = read_tensors(file);
  std::vector<KvPair> pairs;
  const auto add = [&](const std::string& name, const Tensor& k, const Tensor& v) {
    if (k.shape.size() != 3 || v.shape != k.shape || k.shape[0] <= 0 || k.shape[1] <= 0 ||
        k.shape[2] <= 0)
      throw Error(Code::invalid_argument,
                  "'" + file + "': " + name +
                      " K and V must both be [tokens, kv_heads, head_dim], none empty; got " +
                      shape_text(k.shape) + " and " + shape_text(v.shape));
    pairs.push_back({name, k.to_float(name + " K"), v.to_float(name + " V"), k.shape[0], k.shape[1],
                     k.shape[2]});
  };
  if (file.ends_with(".npy")) {
    const Tensor& t = tensors.begin()->second;
    if (t.shape.size() != 4 || t.shape[0] != 2 || t.shape[1] <= 0 || t.shape[2] <= 0 ||
        t.shape[3] <= 0)
      throw Error(Code::invalid_argument,
                  "'" + file + "': a .npy K/V dump must be [2, tokens, kv_heads, head_dim], got " +
                      shape_text(t.shape));
    const std::vector<float> all = t.to_float("'" + file + "'");
    const std::size_t half = all.size() / 2;
    pairs.push_back({"kv",
                     {all.begin(), all.begin() + static_cast<std::ptrdiff_t>(half)},
                     {all.begin() + static_cast<std::ptrdiff_t>(half), all.end()},
                     t.shape[1],
                     t.shape[2],
                     t.shape[3]});
    return pairs;
  }
  for (const auto& [name, tensor] : tensors) {
    for (const auto& [k_suffix, v_suffix] : {std::pair{"key", "value"}, std::pair{"k", "v"}}) {
      if (!name.ends_with(k_suffix)) continue;
      const std::string prefix = name.substr(0, name.size() - std::string(k_suffix).size());
      const auto v = tensors.find(prefix + v_suffix);
      if (v != tensors.end()) {
        add(prefix.empty() ? std::string(k_suffix) : prefix, tensor, v->second);
        break;
      }
    }
  }
  if (pairs.empty()) {
    std::string names;
    for (const auto& [name, t] : tensors) names += (names.empty() ? "" : ", ") + name;
    throw Error(Code::invalid_argument, "'" + file + "': no K/V pair found among [" + names +
                                            "]; expected tensors named k and v, <prefix>k and "
                                            "<prefix>v, or <prefix>key and <prefix>value");
  }
  return pairs;
}

struct Errors {
  double max = 0.0, mean = 0.0;
};

Errors tensor_errors(const std::vector<float>& x, const std::vector<float>& y) {
  double peak = 0, magnitude = 0, total = 0, worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double e = std::fabs(double(y[i]) - x[i]);
    worst = std::max(worst, e), total += e, peak = std::max(peak, double(std::fabs(x[i]))),
    magnitude += std::fabs(x[i]);
  }
  return {peak > 0 ? worst / peak : 0.0, magnitude > 0 ? total / magnitude : 0.0};
}

struct Row {
  std::string format;
  Errors k, v, attention;
};

struct EvaluateFlags {
  std::string kv, q, formats;
  std::uint32_t queries = 8, q_per_kv = 1;
  bool json = false;
};

// The Q of --q, checked against every pair's head dimension; none without --q.
std::optional<Tensor> read_queries(const EvaluateFlags& f, const std::vector<KvPair>& pairs) {
  std::optional<Tensor> q_tensor;
  if (!f.q.empty()) {
    const auto t = read_tensors(f.q);
    if (t.size() != 1)
      throw Error(Code::invalid_argument, "'" + f.q + "' holds " + std::to_string(t.size()) +
                                              " tensors; one Q was expected");
    q_tensor = t.begin()->second;
    for (const KvPair& p : pairs)
      if (q_tensor->shape.size() != 3 || q_tensor->shape[0] <= 0 || q_tensor->shape[1] <= 0 ||
          q_tensor->shape[2] != p.head_dim)
        throw Error(Code::invalid_argument, "'" + f.q + "': expected Q [q_heads, q_len, " +
                                                std::to_string(p.head_dim) + "] for " + p.name +
                                                ", got " + shape_text(q_tensor->shape));
  }
  return q_tensor;
}

// The formats of --formats (nearest installed names for typos), or every built-in one but fp32.
std::vector<std::string> chosen_formats(const EvaluateFlags& f, const Registry& registry) {
  std::vector<std::string> formats;
  if (f.formats.empty()) {
    for (const std::string& name : format_names())
      if (name != "fp32") formats.push_back(name);
  } else {
    // Any quantizer component is a format; a typo gets the nearest installed name.
    for (std::size_t start = 0; start <= f.formats.size();) {
      const std::size_t comma = std::min(f.formats.find(',', start), f.formats.size());
      formats.push_back(f.formats.substr(start, comma - start));
      check_format_name(registry, formats.back());
      start = comma + 1;
    }
  }
  return formats;
}

// The formats, best first, as JSON or a table.
void print_ranking(const EvaluateFlags& f, const std::vector<KvPair>& pairs, bool q_given,
                   const std::vector<Row>& rows) {
  if (f.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const Row& r : rows)
      out.push_back({{"format", r.format},
                     {"k_max_error", r.k.max},
                     {"k_mean_error", r.k.mean},
                     {"v_max_error", r.v.max},
                     {"v_mean_error", r.v.mean},
                     {"attention_max_error", r.attention.max},
                     {"attention_mean_error", r.attention.mean}});
    std::cout << nlohmann::json{{"pairs", pairs.size()},
                                {"tokens", pairs[0].tokens},
                                {"ranking", out}}
                     .dump(2)
              << '\n';
    return;
  }
  std::cout << fmt::format(
      "{}: {} K/V pair(s), {} tokens x {} KV heads x {}; errors: max |e| / max |x| and mean |e| / "
      "mean |x| for K and V,\n"
      "attention: ||out - out_fp32|| / ||out_fp32|| over {} queries; best first\n\n",
      f.kv, pairs.size(), pairs[0].tokens, pairs[0].kv_heads, pairs[0].head_dim,
      q_given ? "the given" : std::to_string(f.queries) + " random");
  std::cout << fmt::format("{:<16} {:>10} {:>10} {:>10} {:>10} {:>12} {:>12}\n", "format", "K max",
                           "K mean", "V max", "V mean", "attn max", "attn mean");
  for (const Row& r : rows)
    std::cout << fmt::format("{:<16} {:>10.2e} {:>10.2e} {:>10.2e} {:>10.2e} {:>12.2e} {:>12.2e}\n",
                             r.format, r.k.max, r.k.mean, r.v.max, r.v.mean, r.attention.max,
                             r.attention.mean);
}

void run_evaluate(const Globals& globals, const EvaluateFlags& f) {
  const std::vector<KvPair> pairs = read_pairs(f.kv);
  const std::optional<Tensor> q_tensor = read_queries(f, pairs);
  const Config base = selected_config(globals);
  const auto registry = Registry::load(base.plugins);
  const std::vector<std::string> formats = chosen_formats(f, *registry);
  std::vector<Row> rows;
  for (const std::string& format : formats) {
    Row row{format, {}, {}, {}};
    double attention_max = 0, attention_sum = 0, k_sum = 0, v_sum = 0;
    std::size_t attention_count = 0;
    for (const KvPair& p : pairs) {
      const std::int64_t q_heads = q_tensor ? q_tensor->shape[0] : p.kv_heads * f.q_per_kv;
      if (q_heads % p.kv_heads != 0)
        throw Error(Code::invalid_argument, "Q has " + std::to_string(q_heads) +
                                                " heads, not a multiple of " +
                                                std::to_string(p.kv_heads) + " KV heads");
      Config config = base;
      config.model = {1, static_cast<std::uint32_t>(q_heads),
                      static_cast<std::uint32_t>(p.kv_heads),
                      static_cast<std::uint32_t>(p.head_dim)};
      config.cache.page_size = 32;  // kivi-k's default group fits
      config.k_format = config.v_format = {.name = format};
      config.layer_groups.clear();  // one layer in `format`
      config.cache.capacity_bytes = (static_cast<std::uint64_t>(p.tokens) / 32 + 2) *
                                    page_cost(store_spec(config, *registry));
      config.mask = {.name = "causal"};
      config.eviction = {.name = "none"};
      const auto cache = Cache::open(config, registry);
      const SeqId id = cache->add_sequence();
      const std::vector<SeqId> ids{id};
      const auto n = static_cast<std::uint32_t>(p.tokens);
      cache->reserve(ids, std::vector<std::uint32_t>{n});
      std::int64_t kv_shape[3] = {p.tokens, p.kv_heads, p.head_dim};
      std::vector<float> k = p.k, v = p.v, kd(k.size()), vd(v.size());
      cache->append(0, ids, std::vector<std::uint32_t>{n}, host_tensor(k.data(), kv_shape),
                    host_tensor(v.data(), kv_shape));
      DLTensor kt = host_tensor(kd.data(), kv_shape), vt = kt;
      vt.data = vd.data();
      cache->store().gather(0, id, kt, vt);
      const Errors ke = tensor_errors(p.k, kd), ve = tensor_errors(p.v, vd);
      row.k.max = std::max(row.k.max, ke.max), row.v.max = std::max(row.v.max, ve.max);
      k_sum += ke.mean, v_sum += ve.mean;

      // Attention of each query at the last position, through the backend, against float32.
      std::vector<Position> positions(p.tokens);
      for (std::int64_t t = 0; t < p.tokens; ++t) positions[t] = t;
      std::mt19937 rng(11);
      std::normal_distribution<float> normal;
      const std::uint32_t queries =
          q_tensor ? static_cast<std::uint32_t>(q_tensor->shape[1]) : f.queries;
      const std::vector<float> q_all = q_tensor ? q_tensor->to_float("Q") : std::vector<float>();
      for (std::uint32_t j = 0; j < queries; ++j) {
        std::vector<float> q(q_heads * p.head_dim), out(q.size()), want(q.size());
        for (std::int64_t h = 0; h < q_heads; ++h)
          for (std::int64_t i = 0; i < p.head_dim; ++i)
            q[h * p.head_dim + i] =
                q_tensor ? q_all[(h * queries + j) * p.head_dim + i] : normal(rng);
        std::int64_t q_shape[3] = {1, q_heads, p.head_dim};
        DLTensor ot = host_tensor(out.data(), q_shape);
        cache->decode(0, ids, host_tensor(q.data(), q_shape), ot);
        reference::attention(
            {static_cast<std::uint32_t>(q_heads), static_cast<std::uint32_t>(p.kv_heads),
             static_cast<std::uint32_t>(p.head_dim)},
            q, p.k, p.v, positions, std::vector<PositionRange>{{0, p.tokens}},
            1.0f / std::sqrt(static_cast<float>(p.head_dim)), want);
        double err = 0, norm = 0;
        for (std::size_t e = 0; e < want.size(); ++e)
          err += std::pow(out[e] - want[e], 2), norm += std::pow(want[e], 2);
        const double relative = norm > 0 ? std::sqrt(err / norm) : 0.0;
        attention_max = std::max(attention_max, relative);
        attention_sum += relative;
        ++attention_count;
      }
    }
    row.k.mean = k_sum / pairs.size(), row.v.mean = v_sum / pairs.size();
    row.attention = {attention_max, attention_count ? attention_sum / attention_count : 0.0};
    rows.push_back(row);
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.attention.mean < b.attention.mean; });
  print_ranking(f, pairs, q_tensor.has_value(), rows);
}

}  // namespace

void add_evaluate_command(CLI::App& app, const Globals& globals) {
  auto f = std::make_shared<EvaluateFlags>();
  CLI::App* evaluate =
      app.add_subcommand("evaluate", "Quantization error on your model's dumped K/V, ranked");
  examples(evaluate, {"kvcache evaluate --kv kv.safetensors",
                      "kvcache evaluate --kv kv.npy --formats int8-per-token,int4-group --json",
                      "kvcache evaluate --kv kv.npy --q q.npy"});
  evaluate
      ->add_option("--kv", f->kv,
                   ".safetensors (k/v pairs [tokens, kv_heads, head_dim]) or .npy [2, tokens, "
                   "kv_heads, head_dim]")
      ->required();
  evaluate->add_option("--q", f->q, "queries [q_heads, q_len, head_dim] (default: random)");
  evaluate->add_option("--queries", f->queries, "random queries per K/V pair")
      ->capture_default_str()
      ->check(positive(f->queries));
  evaluate
      ->add_option("--q-per-kv", f->q_per_kv, "query heads per KV head for random queries (GQA)")
      ->capture_default_str();
  evaluate->add_option("--formats", f->formats, "comma-separated formats (default: all but fp32)");
  evaluate->add_flag("--json", f->json, "print one JSON object");
  evaluate->callback([&globals, f] {
    if (!globals.checks_only) run_evaluate(globals, *f);
  });
}

}  // namespace kvcache::tool
