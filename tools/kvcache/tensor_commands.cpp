// `kvcache quantize` and `kvcache attention`: results to check outside, computed by the real
// plugins (the quantizer components and the chosen backend's store and attention).
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "commands.hpp"
#include "kvcache/cache.hpp"
#include "kvcache/formats.hpp"
#include "kvcache/host_tensor.hpp"
#include "kvcache/registry.hpp"
#include "mask_spec.hpp"
#include "tensor_file.hpp"
#include "validators.hpp"

namespace kvcache::tool {
namespace {

const Tensor& only_tensor(const std::map<std::string, Tensor>& tensors, const std::string& file) {
  if (tensors.size() != 1)
    throw Error(Code::invalid_argument, "'" + file + "' holds " + std::to_string(tensors.size()) +
                                            " tensors; one was expected");
  return tensors.begin()->second;
}

Tensor bytes_tensor(const std::string& dtype, std::vector<std::int64_t> shape,
                    std::vector<std::byte> data) {
  return Tensor{dtype, std::move(shape), std::move(data)};
}

struct QuantizeFlags {
  std::string format, scheme, in, out, backend = "cpu-tbb";  // scheme: --format's old name
  std::optional<std::uint32_t> group, bits;
};

void run_quantize(const Globals& globals, const QuantizeFlags& f) {
  nlohmann::json options = nlohmann::json::object();
  if (f.group) options["group"] = *f.group;
  if (f.bits) options["bits"] = *f.bits;
  // A built-in format, or a quantizer component's (its codes and meta written as the bytes of
  // its slots); a typo gets the nearest name of either.
  const auto registry = Registry::load(selected_config(globals).plugins);
  check_format_name(*registry, f.format);
  const FormatSpec spec = is_built_in_format(f.format) ? parse_format(f.format, options)
                                                       : FormatSpec{.kind = FormatKind::external};
  const Tensor input = only_tensor(read_tensors(f.in), f.in);
  if (input.shape.empty())
    throw Error(Code::invalid_argument, "'" + f.in + "' must have shape [..., head_dim]");
  const auto dim = static_cast<std::uint32_t>(input.shape.back());
  const std::vector<float> x = input.to_float("'" + f.in + "'");
  const std::size_t rows = dim == 0 ? 0 : x.size() / dim;
  // One tile per chunk of rows; a format that groups tokens takes whole groups.
  const std::uint32_t page = spec.groups_tokens() ? spec.group : 256;
  if (spec.groups_tokens() && rows % page != 0)
    throw Error(Code::invalid_argument, f.format + " quantizes whole groups of " +
                                            std::to_string(page) + " rows; '" + f.in + "' has " +
                                            std::to_string(rows));
  const auto quantizer = registry->create_quantizer(f.format, options);
  const TileLayout layout = quantizer->describe(dim, page);

  std::vector<std::byte> codes, meta;
  std::vector<float> dequantized(x.size());
  std::vector<std::byte> tile(layout.tile_bytes);
  for (std::size_t first = 0; first < rows; first += page) {
    const auto n = static_cast<std::uint32_t>(std::min<std::size_t>(page, rows - first));
    std::int64_t shape[2] = {n, dim};
    const DLTensor src = host_tensor(const_cast<float*>(x.data()) + first * dim, shape, 2);
    DLTensor dst = host_tensor(dequantized.data() + first * dim, shape, 2);
    quantizer->encode(src, 0, page, tile.data());
    quantizer->decode(tile.data(), 0, page, dst);
    codes.insert(codes.end(), tile.begin(),
                 tile.begin() + static_cast<std::ptrdiff_t>(n * layout.slot_code_bytes));
    const std::size_t meta_bytes =
        spec.groups_tokens() ? std::size_t{dim} * 4 : n * layout.slot_meta_bytes;
    meta.insert(meta.end(), tile.begin() + static_cast<std::ptrdiff_t>(layout.code_bytes),
                tile.begin() + static_cast<std::ptrdiff_t>(layout.code_bytes + meta_bytes));
  }

  std::vector<std::int64_t> lead(input.shape.begin(), input.shape.end() - 1);
  const auto with_last = [&](std::int64_t last) {
    std::vector<std::int64_t> s = lead;
    s.push_back(last);
    return s;
  };
  std::map<std::string, Tensor> out;
  out["dequantized"] = Tensor::of_floats(input.shape, dequantized);
  const std::int64_t code_columns = layout.slot_code_bytes;
  switch (spec.kind) {
    case FormatKind::fp32:
      out["codes"] = bytes_tensor("F32", input.shape, codes);
      break;
    case FormatKind::fp16:
      out["codes"] = bytes_tensor("F16", input.shape, codes);
      break;
    case FormatKind::bf16:
      out["codes"] = bytes_tensor("BF16", input.shape, codes);
      break;
    case FormatKind::int8_per_token:
    case FormatKind::fp8_e4m3:
      out["codes"] =
          bytes_tensor(spec.kind == FormatKind::int8_per_token ? "I8" : "U8", input.shape, codes);
      out["scales"] = bytes_tensor("F32", with_last(1), meta);
      break;
    case FormatKind::int4_group:
    case FormatKind::kivi_k: {
      // Meta holds (fp16 scale, fp16 minimum) pairs: per group of head_dim (int4-group), or per
      // channel of each token group (kivi-k).
      out["codes"] = bytes_tensor("U8", with_last(code_columns), codes);
      std::vector<std::byte> scales(meta.size() / 2), zeros(meta.size() / 2);
      for (std::size_t i = 0; i < meta.size() / 4; ++i) {
        std::memcpy(scales.data() + 2 * i, meta.data() + 4 * i, 2);
        std::memcpy(zeros.data() + 2 * i, meta.data() + 4 * i + 2, 2);
      }
      const std::vector<std::int64_t> meta_shape =
          spec.groups_tokens()
              ? std::vector<std::int64_t>{static_cast<std::int64_t>(rows / spec.group), dim}
              : with_last(dim / spec.group);
      out["scales"] = bytes_tensor("F16", meta_shape, scales);
      out["zeros"] = bytes_tensor("F16", meta_shape, zeros);
      break;
    }
    case FormatKind::external:
      out["codes"] = bytes_tensor("U8", with_last(code_columns), codes);
      if (layout.slot_meta_bytes > 0)
        out["meta"] = bytes_tensor("U8", with_last(layout.slot_meta_bytes), meta);
      break;
  }
  write_safetensors(f.out, out);
  std::cerr << fmt::format("{}: {} rows of {} quantized as {} -> {}\n", f.in, rows, dim, f.format,
                           f.out);
}

struct AttentionFlags {
  std::string q, k, v, out, mask = "causal", k_format = "fp32", v_format = "fp32";
  std::optional<std::string> backend;
  std::uint32_t page_size = 16;
};

// [heads, len, dim] -> [len, heads, dim] (and back, with the roles swapped).
std::vector<float> swap_leading(const std::vector<float>& x, std::int64_t a, std::int64_t b,
                                std::int64_t dim) {
  std::vector<float> y(x.size());
  for (std::int64_t i = 0; i < a; ++i)
    for (std::int64_t j = 0; j < b; ++j)
      std::memcpy(y.data() + (j * a + i) * dim, x.data() + (i * b + j) * dim,
                  static_cast<std::size_t>(dim) * 4);
  return y;
}

void run_attention(const Globals& globals, const AttentionFlags& f) {
  const Tensor q = only_tensor(read_tensors(f.q), f.q), k = only_tensor(read_tensors(f.k), f.k),
               v = only_tensor(read_tensors(f.v), f.v);
  if (q.shape.size() != 3 || k.shape.size() != 3 || v.shape != k.shape)
    throw Error(
        Code::invalid_argument,
        "expected Q [q_heads, q_len, head_dim] and K, V [kv_heads, kv_len, head_dim]; got Q " +
            shape_text(q.shape) + ", K " + shape_text(k.shape) + ", V " + shape_text(v.shape));
  const std::int64_t q_heads = q.shape[0], q_len = q.shape[1], dim = q.shape[2];
  const std::int64_t kv_heads = k.shape[0], kv_len = k.shape[1];
  if (k.shape[2] != dim)
    throw Error(Code::invalid_argument, "Q and K differ in head_dim: " + shape_text(q.shape) +
                                            " vs " + shape_text(k.shape));
  if (kv_heads == 0 || q_heads % kv_heads != 0)
    throw Error(Code::invalid_argument, "q_heads (" + std::to_string(q_heads) +
                                            ") must be a multiple of kv_heads (" +
                                            std::to_string(kv_heads) + ")");
  if (q_len > kv_len || q_len == 0)
    throw Error(Code::invalid_argument,
                "the queries are the last q_len positions: q_len must be in 1..kv_len (" +
                    std::to_string(kv_len) + ")");

  Config config = selected_config(globals);
  if (f.backend) config.backends = {{.name = *f.backend}};
  config.model = {1, static_cast<std::uint32_t>(q_heads), static_cast<std::uint32_t>(kv_heads),
                  static_cast<std::uint32_t>(dim)};
  config.cache.page_size = f.page_size;
  config.k_format = {.name = f.k_format};
  config.v_format = {.name = f.v_format};
  config.layer_groups.clear();  // one layer, under --mask
  // The registry first: a format from a plugin is sized by its own component.
  const auto registry = Registry::load(config.plugins);
  for (const std::string& format : {f.k_format, f.v_format}) check_format_name(*registry, format);
  const std::uint64_t pages = static_cast<std::uint64_t>(kv_len) / f.page_size + 2;
  config.cache.capacity_bytes = pages * page_cost(store_spec(config, *registry));
  config.mask = parse_mask_spec(f.mask);
  config.eviction = {.name = "none"};
  const auto cache = Cache::open(config, registry);

  const SeqId id = cache->add_sequence();
  const std::vector<SeqId> ids{id};
  cache->reserve(ids, std::vector<std::uint32_t>{static_cast<std::uint32_t>(kv_len)});
  std::vector<float> kt = swap_leading(k.to_float("K"), kv_heads, kv_len, dim),
                     vt = swap_leading(v.to_float("V"), kv_heads, kv_len, dim);
  std::int64_t kv_shape[3] = {kv_len, kv_heads, dim};
  cache->append(0, ids, std::vector<std::uint32_t>{static_cast<std::uint32_t>(kv_len)},
                host_tensor(kt.data(), kv_shape), host_tensor(vt.data(), kv_shape));
  std::vector<float> qt = swap_leading(q.to_float("Q"), q_heads, q_len, dim), out(qt.size());
  std::int64_t q_shape[3] = {q_len, q_heads, dim};
  DLTensor ot = host_tensor(out.data(), q_shape);
  cache->prefill(0, ids, std::vector<std::uint32_t>{static_cast<std::uint32_t>(q_len)},
                 host_tensor(qt.data(), q_shape), ot);
  write_safetensors(
      f.out,
      {{"out", Tensor::of_floats({q_heads, q_len, dim}, swap_leading(out, q_len, q_heads, dim))}});
  std::cerr << fmt::format(
      "attention of {} queries over {} keys ({}, K {}, V {}, backend {}) -> {}\n", q_len, kv_len,
      f.mask, f.k_format, f.v_format, cache->backend(), f.out);
}

}  // namespace

void add_tensor_commands(CLI::App& app, const Globals& globals) {
  auto qf = std::make_shared<QuantizeFlags>();
  CLI::App* quantize = app.add_subcommand(
      "quantize", "Quantize [..., head_dim] floats; write codes, scales, zeros, dequantized");
  examples(
      quantize,
      {"kvcache quantize --format int8-per-token --in k.npy --out k8.safetensors",
       "kvcache quantize --format kivi-k --bits 2 --group 32 --in k.npy --out k2.safetensors"});
  CLI::Option* format =
      quantize->add_option("--format", qf->format, "storage format, e.g. int8-per-token");
  quantize->add_option("--scheme", qf->scheme, "the old name of --format (deprecated)")
      ->excludes(format);
  quantize->add_option("--in", qf->in, "input .npy or .safetensors (one tensor)")->required();
  quantize->add_option("--out", qf->out, "output .safetensors")->required();
  quantize->add_option("--group", qf->group, "group size (int4-group: elements, kivi-k: tokens)");
  quantize->add_option("--bits", qf->bits, "kivi-k code bits (4 or 2)");
  quantize->callback([&globals, qf] {
    if (globals.checks_only) return;
    if (!qf->scheme.empty()) {
      std::cerr << "kvcache: warning: --scheme is deprecated; use --format\n";
      qf->format = qf->scheme;
    }
    if (qf->format.empty()) throw CLI::RequiredError("--format");
    run_quantize(globals, *qf);
  });

  auto af = std::make_shared<AttentionFlags>();
  CLI::App* attention = app.add_subcommand(
      "attention", "Attention of Q over K, V through a backend; write tensor 'out'");
  examples(attention, {"kvcache attention --q q.npy --k k.npy --v v.npy --out out.safetensors",
                       "kvcache attention --q q.npy --k k.npy --v v.npy --out out.safetensors "
                       "--mask sink-window:4:1024 --k-format int8-per-token"});
  attention->add_option("--q", af->q, "Q [q_heads, q_len, head_dim] (.npy/.safetensors)")
      ->required();
  attention->add_option("--k", af->k, "K [kv_heads, kv_len, head_dim]")->required();
  attention->add_option("--v", af->v, "V [kv_heads, kv_len, head_dim]")->required();
  attention
      ->add_option("--out", af->out,
                   "output .safetensors with tensor 'out' [q_heads, q_len, head_dim]")
      ->required();
  attention->add_option("--mask", af->mask, "causal, sliding-window:W, sink-window:S:W, chunked:C")
      ->capture_default_str();
  attention->add_option("--k-format", af->k_format, "store K in this format first")
      ->capture_default_str();
  attention->add_option("--v-format", af->v_format, "store V in this format first")
      ->capture_default_str();
  attention->add_option("--backend", af->backend,
                        "backend (default: the config's preference list)");
  attention->add_option("--page-size", af->page_size, "tokens per page")
      ->capture_default_str()
      ->check(whole_number(1, 1024));
  attention->callback([&globals, af] {
    if (!globals.checks_only) run_attention(globals, *af);
  });
}

}  // namespace kvcache::tool
