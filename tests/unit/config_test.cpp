#include <unistd.h>  // getpid

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kvcache/config.hpp"
#include "kvcache/rope.hpp"

namespace kvcache {
namespace {

constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::uint64_t kGiB = 1ULL << 30;
const Environment kNoEnv;

// The diagnostics of the ConfigError that parsing `yaml` as "test.yaml" throws.
std::vector<Diagnostic> diagnostics_of(const std::string& yaml, const Environment& env = kNoEnv) {
  try {
    parse_config(yaml, "test.yaml", env);
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.code(), Code::invalid_argument);
    return e.diagnostics();
  }
  ADD_FAILURE() << "no ConfigError for:\n" << yaml;
  return {};
}

// Checks one error diagnostic: where (test.yaml, line, column), its key, and that its message
// contains `text`.
void expect_error(const Diagnostic& d, int line, int column, const std::string& key,
                  const std::string& text) {
  EXPECT_EQ(d.severity, Diagnostic::Severity::error) << to_string(d);
  EXPECT_EQ(d.where.origin, "test.yaml") << to_string(d);
  EXPECT_EQ(d.where.line, line) << to_string(d);
  EXPECT_EQ(d.where.column, column) << to_string(d);
  EXPECT_EQ(d.key, key) << to_string(d);
  EXPECT_NE(d.message.find(text), std::string::npos) << to_string(d);
}

// Compares every value (not where it came from) that a config file can state.
void expect_same_values(const Config& a, const Config& b) {
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.rope, b.rope);
  ASSERT_EQ(a.backend_names(), b.backend_names());
  for (std::size_t i = 0; i < a.backends.size(); ++i) {
    EXPECT_EQ(a.backends[i].options, b.backends[i].options)
        << a.backends[i].name << ": " << a.backends[i].options.dump() << " vs "
        << b.backends[i].options.dump();
  }
  EXPECT_EQ(a.cache.page_size, b.cache.page_size);
  EXPECT_EQ(a.cache.capacity_bytes, b.cache.capacity_bytes);
  EXPECT_EQ(a.cache.prefix_caching, b.cache.prefix_caching);
  for (const auto& [x, y] :
       {std::pair{&a.k_format, &b.k_format}, std::pair{&a.v_format, &b.v_format},
        std::pair{&a.mask, &b.mask}, std::pair{&a.eviction, &b.eviction}}) {
    EXPECT_EQ(x->name, y->name);
    EXPECT_EQ(x->options, y->options) << x->options.dump() << " vs " << y->options.dump();
  }
  ASSERT_EQ(a.remote.has_value(), b.remote.has_value());
  if (a.remote) {
    const RemoteSettings &x = *a.remote, &y = *b.remote;
    EXPECT_EQ(x.transport.name, y.transport.name);
    EXPECT_EQ(x.transport.options, y.transport.options);
    EXPECT_EQ(std::tie(x.endpoints, x.label, x.salt_env, x.model, x.queue_bytes, x.min_pages,
                       x.batch_pages, x.deadline_ms, x.breaker_failures, x.breaker_open_ms),
              std::tie(y.endpoints, y.label, y.salt_env, y.model, y.queue_bytes, y.min_pages,
                       y.batch_pages, y.deadline_ms, y.breaker_failures, y.breaker_open_ms));
  }
  ASSERT_EQ(a.plugins.paths.size(), b.plugins.paths.size());
  for (std::size_t i = 0; i < a.plugins.paths.size(); ++i) {
    EXPECT_EQ(a.plugins.paths[i].path, b.plugins.paths[i].path);
    EXPECT_EQ(a.plugins.paths[i].required, b.plugins.paths[i].required);
  }
  ASSERT_EQ(a.plugins.required.size(), b.plugins.required.size());
  for (std::size_t i = 0; i < a.plugins.required.size(); ++i) {
    EXPECT_EQ(a.plugins.required[i].name, b.plugins.required[i].name);
  }
}

TEST(Locations, Format) {
  EXPECT_EQ(to_string(SourceLocation{"f.yaml", 3, 14}), "f.yaml:3:14");
  EXPECT_EQ(to_string(SourceLocation{"environment variable KVCACHE_MASK", 0, 0}),
            "environment variable KVCACHE_MASK");
  Diagnostic diagnostic;
  diagnostic.where = {"f.yaml", 3, 14};
  diagnostic.key = "cache.page_size";
  diagnostic.message = "bad";
  EXPECT_EQ(to_string(diagnostic), "f.yaml:3:14: error: cache.page_size: bad");
  diagnostic.severity = Diagnostic::Severity::warning;
  diagnostic.where = {"env", 0, 0};
  diagnostic.key.clear();
  EXPECT_EQ(to_string(diagnostic), "env: warning: bad");
}

// Found by the config fuzz target: an option value that is not UTF-8 ended the program when its
// JSON was serialized. The text is refused at the byte, before anything reads it.
TEST(Errors, TextThatIsNotUtf8OrHoldsControlsIsRefusedAtTheByte) {
  const auto list = diagnostics_of(
      "mask: causal\neviction: {name: heavy-hitter, r\xE9"
      "cent: 32}\n");
  ASSERT_EQ(list.size(), 1u);
  expect_error(list[0], 2, 33, "", "not UTF-8 here (byte 0xE9)");
  EXPECT_EQ(diagnostics_of("mask: \xED\xA0\x80\n").size(), 1u);      // a surrogate
  EXPECT_EQ(diagnostics_of("mask: \xC0\xAF\n").size(), 1u);          // an overlong '/'
  EXPECT_EQ(diagnostics_of("mask: \xF4\x90\x80\x80\n").size(), 1u);  // past U+10FFFF
  EXPECT_NO_THROW(parse_config("# caf\xC3\xA9 \xF0\x9F\x98\x80\nmask: causal\n", "t.yaml", kNoEnv));
  // A NUL in a key parsed, then did not survive to_yaml: control characters are refused too.
  const auto nul = diagnostics_of(std::string("eviction: {name: lru, sin\0k: 4}\n", 32));
  ASSERT_EQ(nul.size(), 1u);
  expect_error(nul[0], 1, 26, "", "a control character, which YAML does not allow (byte 0x00)");
  // A lone carriage return in a name: yaml-cpp read it back one shorter.
  const auto cr = diagnostics_of("mask: caus\r\ral\n");
  ASSERT_EQ(cr.size(), 1u);
  expect_error(cr[0], 1, 11, "", "byte 0x0D");
  EXPECT_NO_THROW(parse_config("mask: causal\r\neviction: lru\r\n", "t.yaml", kNoEnv));
  const auto env = diagnostics_of("", Environment{{"KVCACHE_EVICTION", "lru\xFF"}});
  ASSERT_EQ(env.size(), 1u);
  EXPECT_EQ(env[0].where.origin, "environment variable KVCACHE_EVICTION");
}

// Found by the config fuzz target: yaml-cpp 0.7's LoadAll never returns on these.
TEST(Errors, StrayCommasAndBracketsAreErrorsNotHangs) {
  for (const char* text : {",}]\n", ", a: b}]\n", ",\n"}) {
    const auto list = diagnostics_of(text);
    ASSERT_EQ(list.size(), 1u) << text;
    expect_error(list[0], 1, 1, "", "not YAML");
  }
}

TEST(DefaultConfig, IsTheEmbeddedYaml) {
  EXPECT_NE(default_config_yaml().find("model:"), std::string::npos);
  const Config c = default_config(kNoEnv);
  EXPECT_EQ(c.origin, "<embedded default>");
  EXPECT_EQ(c.model, (ModelShape{32, 32, 8, 128}));
  EXPECT_EQ(c.backend_names(), (std::vector<std::string>{"cuda", "hip", "cpu-tbb"}));
  for (const ComponentChoice& backend : c.backends) EXPECT_TRUE(backend.options.empty());
  EXPECT_EQ(c.backends_where.origin, "<embedded default>");
  EXPECT_EQ(c.cache.page_size, 16u);
  EXPECT_EQ(c.cache.capacity_bytes, 2 * kGiB);
  EXPECT_TRUE(c.cache.prefix_caching);
  EXPECT_EQ(c.k_format.name, "fp16");
  EXPECT_EQ(c.v_format.name, "fp16");
  EXPECT_EQ(c.mask.name, "causal");
  EXPECT_EQ(c.mask.options, nlohmann::json::object());
  EXPECT_EQ(c.eviction.name, "none");
  EXPECT_TRUE(c.plugins.paths.empty());
  EXPECT_TRUE(c.plugins.env_paths.empty());
  EXPECT_TRUE(c.plugins.required.empty());
  EXPECT_TRUE(c.warnings.empty());
}

TEST(Overlay, AFileStatesOnlyWhatDiffers) {
  const Config c = parse_config("cache:\n  page_size: 32\n", "test.yaml", kNoEnv);
  const Config defaults = default_config(kNoEnv);
  EXPECT_EQ(c.origin, "test.yaml");
  EXPECT_EQ(c.cache.page_size, 32u);
  EXPECT_EQ(c.cache.capacity_bytes, defaults.cache.capacity_bytes);
  EXPECT_EQ(c.cache.prefix_caching, defaults.cache.prefix_caching);
  EXPECT_EQ(c.model, defaults.model);
  EXPECT_EQ(c.backend_names(), defaults.backend_names());
  EXPECT_EQ(c.k_format.name, "fp16");
  EXPECT_EQ(c.mask.name, "causal");
  EXPECT_EQ(c.eviction.name, "none");
}

TEST(Overlay, EmptyFileIsTheDefault) {
  expect_same_values(parse_config("# nothing\n", "test.yaml", kNoEnv), default_config(kNoEnv));
}

TEST(Overlay, ModelKeysOverrideOneByOne) {
  const Config c = parse_config("model: {layers: 80, kv_heads: 4}\n", "test.yaml", kNoEnv);
  EXPECT_EQ(c.model, (ModelShape{80, 32, 4, 128}));
}

TEST(Model, APresetSetsTheShapeAndTheRopeAndKeysBesideItOverride) {
  const Config c = parse_config("model: {head_dim: 128, preset: smollm2-135m}\n", "t", kNoEnv);
  EXPECT_EQ(c.model, (ModelShape{30, 9, 3, 128}));  // the preset first, wherever it stands
  ASSERT_TRUE(c.rope);
  EXPECT_EQ(c.rope->theta, 100000.0);
  EXPECT_EQ(c.rope->style, RopeStyle::neox);
  EXPECT_FALSE(default_config(kNoEnv).rope) << "positions are the engine's business by default";
}

TEST(Model, RopeStatesWhatDiffersFromThePresetOrTheDefaults) {
  const Config c = parse_config(
      "model:\n"
      "  rope: {theta: 500000, style: gptj, dims: 32,\n"
      "         scaling: {type: llama3, factor: 8, original_context: 8192}}\n",
      "t", kNoEnv);
  ASSERT_TRUE(c.rope);
  EXPECT_EQ(c.rope->theta, 500000.0);
  EXPECT_EQ(c.rope->dims, 32u);
  EXPECT_EQ(c.rope->style, RopeStyle::gptj);
  EXPECT_EQ(c.rope->scaling.kind, RopeScaling::Kind::llama3);
  EXPECT_EQ(c.rope->scaling.factor, 8.0);
  EXPECT_EQ(c.rope->scaling.high_freq_factor, 4.0);
  // Llama 3.1's frequencies: the fastest kept, the slowest divided by 8 (Hugging Face's values).
  const std::vector<double> f = rope_frequencies(*c.rope, 128);
  EXPECT_DOUBLE_EQ(f.front(), 1.0);
  EXPECT_NEAR(f.back(), std::pow(500000.0, -30.0 / 32.0) / 8.0, 1e-15);
}

TEST(Errors, RopeAndPresetMistakesNameTheNearest) {
  const auto d = diagnostics_of(
      "model:\n"
      "  preset: smollm2-135\n"
      "  rope: {style: neo, dims: 7, theta: -1, scaling: {type: lama3}}\n");
  ASSERT_EQ(d.size(), 5u);
  expect_error(d[0], 2, 11, "model.preset", "did you mean 'smollm2-135m'");
  expect_error(d[1], 3, 17, "model.rope.style", "did you mean 'neox'");
  expect_error(d[2], 3, 28, "model.rope.dims", "even");
  expect_error(d[3], 3, 38, "model.rope.theta", "greater than 0");
  expect_error(d[4], 3, 58, "model.rope.scaling.type", "did you mean 'llama3'");
}

// remote: the remote tier. Absent by default; every key read, the rest at their defaults.
TEST(Remote, SectionReadsEveryKey) {
  EXPECT_FALSE(parse_config("", "test.yaml", kNoEnv).remote);
  const Config c = parse_config(
      "remote:\n"
      "  transport: memory\n"
      "  endpoints: [space-a]\n"
      "  namespace: {label: tenant-a, salt_env: KVC_SALT}\n"
      "  model: \"smollm2-135m@abc\"\n"
      "  write: {queue: 64MiB}\n"
      "  read: {min_pages: 4, batch_pages: 16, deadline_ms: 500}\n"
      "  breaker: {failures: 5, open_ms: 2000}\n",
      "test.yaml", kNoEnv);
  ASSERT_TRUE(c.remote);
  const RemoteSettings& r = *c.remote;
  EXPECT_EQ(r.transport.name, "memory");
  EXPECT_EQ(r.endpoints, std::vector<std::string>{"space-a"});
  EXPECT_EQ(r.label, "tenant-a");
  EXPECT_EQ(r.salt_env, "KVC_SALT");
  EXPECT_EQ(r.model, "smollm2-135m@abc");
  EXPECT_EQ(r.queue_bytes, 64ull << 20);
  EXPECT_EQ(std::tie(r.min_pages, r.batch_pages, r.deadline_ms), std::tuple(4u, 16u, 500u));
  EXPECT_EQ(std::tie(r.breaker_failures, r.breaker_open_ms), std::tuple(5u, 2000u));
  EXPECT_EQ(r.where.line, 2);
  const Config defaults =
      parse_config("remote: {transport: memory, endpoints: [x], model: m}\n", "t.yaml", kNoEnv);
  EXPECT_EQ(defaults.remote->label, "default");
  EXPECT_EQ(defaults.remote->queue_bytes, 256ull << 20);
}

TEST(Errors, RemoteMistakesNameTheKeyAndTheNearest) {
  const auto d = diagnostics_of(
      "remote:\n"
      "  transport: memory\n"
      "  endpoint: [x]\n"
      "  namespace: {label: \"a:b\"}\n"
      "  read: {min_page: 2, deadline_ms: 0}\n");
  ASSERT_EQ(d.size(), 4u);
  expect_error(d[0], 3, 3, "remote", "did you mean 'endpoints'");
  expect_error(d[1], 4, 22, "remote.namespace.label", "part of every key");
  expect_error(d[2], 5, 10, "remote.read", "did you mean 'min_pages'");
  expect_error(d[3], 5, 36, "remote.read.deadline_ms", "positive integer");
  // A section without errors but without the model's identity is refused at its start.
  const auto no_model = diagnostics_of("\nremote: {transport: memory, endpoints: [x]}\n");
  ASSERT_EQ(no_model.size(), 1u);
  expect_error(no_model[0], 2, 9, "remote.model", "the model's identity");
  const auto no_prefix = diagnostics_of(
      "cache: {prefix_caching: false}\nremote: {transport: memory, endpoints: [x], model: m}\n");
  ASSERT_EQ(no_prefix.size(), 1u);
  expect_error(no_prefix[0], 2, 9, "remote", "prefix_caching");
}

TEST(Overlay, BackendAsListOrSingleName) {
  const Config list = parse_config("backend: [cpu-tbb, cuda]\n", "test.yaml", kNoEnv);
  EXPECT_EQ(list.backend_names(), (std::vector<std::string>{"cpu-tbb", "cuda"}));
  EXPECT_EQ(list.backends_where.line, 1);
  EXPECT_EQ(list.backends_where.column, 10);
  ASSERT_EQ(list.backends.size(), 2u);
  EXPECT_EQ(list.backends[1].where.column, 20);
  for (const ComponentChoice& backend : list.backends) EXPECT_TRUE(backend.options.empty());
  const Config single = parse_config("\nbackend: cpu-tbb\n", "test.yaml", kNoEnv);
  EXPECT_EQ(single.backend_names(), (std::vector<std::string>{"cpu-tbb"}));
  EXPECT_EQ(single.backends_where.line, 2);
}

// A list entry is a component like any other section: a name, or a mapping of name and options.
TEST(Overlay, BackendEntriesTakeOptions) {
  const Config c =
      parse_config("backend: [{name: cpu-tbb, threads: 1}, cuda]\n", "test.yaml", kNoEnv);
  EXPECT_EQ(c.backend_names(), (std::vector<std::string>{"cpu-tbb", "cuda"}));
  ASSERT_EQ(c.backends.size(), 2u);
  EXPECT_EQ(c.backends[0].options, (nlohmann::json{{"threads", 1}}));
  EXPECT_TRUE(c.backends[0].options["threads"].is_number_integer());
  EXPECT_EQ(c.backends[0].where.line, 1);
  EXPECT_EQ(c.backends[0].where.column, 18);
  ASSERT_EQ(c.backends[0].option_where.count("threads"), 1u);
  EXPECT_EQ(c.backends[0].option_where.at("threads").origin, "test.yaml");
  EXPECT_EQ(c.backends[0].option_where.at("threads").line, 1);
  EXPECT_EQ(c.backends[0].option_where.at("threads").column, 36);
  EXPECT_TRUE(c.backends[1].options.empty());
  EXPECT_EQ(c.backends[1].where.column, 40);
  // A lone mapping is a list of one.
  const Config single = parse_config("backend:\n  name: cuda\n  device: 1\n", "test.yaml", kNoEnv);
  ASSERT_EQ(single.backends.size(), 1u);
  EXPECT_EQ(single.backends[0].name, "cuda");
  EXPECT_EQ(single.backends[0].options, (nlohmann::json{{"device", 1}}));
  EXPECT_EQ(single.backends[0].option_where.at("device").line, 3);
}

TEST(Errors, BackendEntryMustBeANameOrAMapping) {
  const auto list = diagnostics_of("backend: [cpu-tbb, [cuda]]\n");
  ASSERT_EQ(list.size(), 1u);
  expect_error(list[0], 1, 20, "backend[1]",
               "expected a name or a mapping with 'name' and options, got a list");
  const auto unnamed = diagnostics_of("\nbackend: [cuda, {device: 1}]\n");
  ASSERT_EQ(unnamed.size(), 1u);
  expect_error(unnamed[0], 2, 17, "backend[1]", "missing key 'name'");
  const auto empty = diagnostics_of("backend: []\n");
  ASSERT_EQ(empty.size(), 1u);
  expect_error(empty[0], 1, 10, "backend", "a non-empty list of them, got an empty list");
}

TEST(Overlay, CapacityAcceptsUnitsOrBytes) {
  EXPECT_EQ(parse_config("cache: {capacity: 512 MiB}", "t", kNoEnv).cache.capacity_bytes,
            512 * kMiB);
  EXPECT_EQ(parse_config("cache: {capacity: 1.5GB}", "t", kNoEnv).cache.capacity_bytes,
            1'500'000'000u);
  EXPECT_EQ(parse_config("cache: {capacity: 4096}", "t", kNoEnv).cache.capacity_bytes, 4096u);
}

TEST(Components, PlainNameHasNoOptions) {
  const Config c = parse_config("mask: sliding-window\neviction: none\n", "test.yaml", kNoEnv);
  EXPECT_EQ(c.mask.name, "sliding-window");
  EXPECT_EQ(c.mask.options, nlohmann::json::object());
  EXPECT_EQ(c.mask.where.line, 1);
  EXPECT_EQ(c.mask.where.column, 7);
  EXPECT_EQ(c.eviction.name, "none");
}

TEST(Components, MappingOptionsBecomeTypedJson) {
  const Config c = parse_config(
      "mask:\n"
      "  name: sink-window\n"
      "  sinks: 4\n"
      "  ratio: 0.5\n"
      "  strict: true\n"
      "  label: recent\n"
      "  quoted: \"16\"\n"
      "  big: 18446744073709551615\n"
      "  negative: -3\n"
      "  nothing: ~\n"
      "  layers: [0, 1, last]\n"
      "  nested: {a: 1, b: [x]}\n",
      "test.yaml", kNoEnv);
  EXPECT_EQ(c.mask.name, "sink-window");
  EXPECT_EQ(c.mask.where.line, 2);
  EXPECT_EQ(c.mask.where.column, 9);
  const nlohmann::json& o = c.mask.options;
  EXPECT_FALSE(o.contains("name"));
  EXPECT_TRUE(o["sinks"].is_number_integer());
  EXPECT_EQ(o["sinks"], 4);
  EXPECT_TRUE(o["ratio"].is_number_float());
  EXPECT_EQ(o["ratio"], 0.5);
  EXPECT_TRUE(o["strict"].is_boolean());
  EXPECT_EQ(o["strict"], true);
  EXPECT_EQ(o["label"], "recent");
  EXPECT_EQ(o["quoted"], "16");
  EXPECT_EQ(o["big"], 18446744073709551615u);
  EXPECT_EQ(o["negative"], -3);
  EXPECT_TRUE(o["nothing"].is_null());
  EXPECT_EQ(o["layers"], nlohmann::json::parse(R"([0, 1, "last"])"));
  EXPECT_EQ(o["nested"], nlohmann::json::parse(R"({"a": 1, "b": ["x"]})"));
}

TEST(Components, APresentSectionReplacesTheWholeChoice) {
  const std::string base = "mask: {name: sink-window, sinks: 4, window: 4096}\n";
  const Config c = parse_config(base + "eviction: {name: streaming, window: 1024}\n", "t", kNoEnv);
  EXPECT_EQ(c.mask.options.size(), 2u);
  EXPECT_EQ(c.eviction.name, "streaming");
  EXPECT_EQ(c.eviction.options, nlohmann::json::parse(R"({"window": 1024})"));
}

TEST(Components, QuantizerNameSetsBoth) {
  const Config c = parse_config("quantizer: int8-per-token\n", "test.yaml", kNoEnv);
  EXPECT_EQ(c.k_format.name, "int8-per-token");
  EXPECT_EQ(c.v_format.name, "int8-per-token");
  EXPECT_EQ(c.v_format.where.column, 12);
}

// `format` is the section's name; `quantizer`, its old one, still reads the same, but not both.
TEST(Components, FormatIsTheSectionAndQuantizerItsOldName) {
  const Config c = parse_config("format: {k: int8-per-token, v: int4-group}\n", "t", kNoEnv);
  EXPECT_EQ(c.k_format.name, "int8-per-token");
  EXPECT_EQ(c.v_format.name, "int4-group");
  EXPECT_EQ(c.v_format.where.column, 32);
  const auto twice = diagnostics_of("format: fp16\nquantizer: int8-per-token\n");
  ASSERT_EQ(twice.size(), 1u);
  expect_error(twice[0], 2, 12, "quantizer", "'quantizer' is the old name of 'format'");
  const Config from_env = parse_config("", "t", {{"KVCACHE_FORMAT_V", "int4-group"}});
  EXPECT_EQ(from_env.v_format.name, "int4-group");
  EXPECT_EQ(from_env.k_format.name, "fp16");
}

TEST(Components, QuantizerMappingSetsWhatItNames) {
  const Config both = parse_config(
      "quantizer: {k: int8-per-token, v: {name: int4-group, group: 64}}\n", "t", kNoEnv);
  EXPECT_EQ(both.k_format.name, "int8-per-token");
  EXPECT_EQ(both.v_format.name, "int4-group");
  EXPECT_EQ(both.v_format.options, nlohmann::json::parse(R"({"group": 64})"));
  const Config only_v = parse_config("quantizer: {v: int4-group}\n", "t", kNoEnv);
  EXPECT_EQ(only_v.k_format.name, "fp16");
  EXPECT_EQ(only_v.v_format.name, "int4-group");
}

TEST(Plugins, PathsAsStringsOrMappings) {
  const Config c = parse_config(
      "plugins:\n"
      "  paths:\n"
      "    - /opt/kvcache/plugins\n"
      "    - {path: /opt/x/libkvcache-cuda.so, required: true}\n"
      "    - path: ./more\n"
      "  required: [kvcache-cpu-tbb]\n",
      "test.yaml", kNoEnv);
  ASSERT_EQ(c.plugins.paths.size(), 3u);
  EXPECT_EQ(c.plugins.paths[0].path, "/opt/kvcache/plugins");
  EXPECT_FALSE(c.plugins.paths[0].required);
  EXPECT_EQ(c.plugins.paths[0].where.line, 3);
  EXPECT_EQ(c.plugins.paths[0].where.column, 7);
  EXPECT_EQ(c.plugins.paths[1].path, "/opt/x/libkvcache-cuda.so");
  EXPECT_TRUE(c.plugins.paths[1].required);
  EXPECT_EQ(c.plugins.paths[1].where.line, 4);
  EXPECT_EQ(c.plugins.paths[1].where.column, 14);
  EXPECT_EQ(c.plugins.paths[2].path, "./more");
  EXPECT_FALSE(c.plugins.paths[2].required);
  ASSERT_EQ(c.plugins.required.size(), 1u);
  EXPECT_EQ(c.plugins.required[0].name, "kvcache-cpu-tbb");
  EXPECT_EQ(c.plugins.required[0].where.line, 6);
  EXPECT_EQ(c.plugins.required[0].where.column, 14);
}

TEST(Plugins, RequiredAloneKeepsDefaultPaths) {
  const Config c = parse_config("plugins: {required: [a.so]}\n", "t", kNoEnv);
  EXPECT_TRUE(c.plugins.paths.empty());
  ASSERT_EQ(c.plugins.required.size(), 1u);
}

TEST(Errors, UnknownTopLevelKeySuggestsTheNearest) {
  const auto d = diagnostics_of("cache: {page_size: 32}\nmodle: {layers: 2}\n");
  ASSERT_EQ(d.size(), 1u);
  expect_error(d[0], 2, 1, "", "unknown key 'modle' (did you mean 'model'?)");
}

TEST(Errors, UnknownNestedKeySuggestsTheNearest) {
  const auto d = diagnostics_of("cache:\n  page_sise: 32\n");
  ASSERT_EQ(d.size(), 1u);
  expect_error(d[0], 2, 3, "cache", "unknown key 'page_sise' (did you mean 'page_size'?)");
  EXPECT_EQ(to_string(d[0]),
            "test.yaml:2:3: error: cache: unknown key 'page_sise' (did you mean 'page_size'?)");
}

TEST(Errors, UnknownKeyWithoutNearMatchListsTheKnownOnes) {
  const auto d = diagnostics_of("model: {layers: 2, experts: 8}\n");
  ASSERT_EQ(d.size(), 1u);
  expect_error(
      d[0], 1, 20, "model",
      "unknown key 'experts'; expected one of: preset, layers, q_heads, kv_heads, head_dim, rope");
  const auto q = diagnostics_of("quantizer: {group: 64}\n");
  ASSERT_EQ(q.size(), 1u);
  expect_error(q[0], 1, 13, "quantizer", "unknown key 'group'; expected one of: k, v");
  const auto p = diagnostics_of("plugins: {path: [a]}\n");
  ASSERT_EQ(p.size(), 1u);
  expect_error(p[0], 1, 11, "plugins", "unknown key 'path' (did you mean 'paths'?)");
}

TEST(Errors, WrongTypeIsReportedAtTheValue) {
  const auto scalar = diagnostics_of("cache: {page_size: abc}\n");
  ASSERT_EQ(scalar.size(), 1u);
  expect_error(scalar[0], 1, 20, "cache.page_size", "expected a positive integer, got 'abc'");
  const auto list = diagnostics_of("\nmodel: [1, 2]\n");
  ASSERT_EQ(list.size(), 1u);
  expect_error(list[0], 2, 8, "model",
               "expected a mapping with keys preset, layers, q_heads, kv_heads, "
               "head_dim, rope, got a list");
  const auto boolean = diagnostics_of("cache:\n  prefix_caching: maybe\n");
  ASSERT_EQ(boolean.size(), 1u);
  expect_error(boolean[0], 2, 19, "cache.prefix_caching", "expected true or false, got 'maybe'");
  const auto zero = diagnostics_of("model: {layers: 0}\n");
  ASSERT_EQ(zero.size(), 1u);
  expect_error(zero[0], 1, 17, "model.layers", "expected a positive integer, got '0'");
  const auto empty = diagnostics_of("backend:\n");
  ASSERT_EQ(empty.size(), 1u);
  expect_error(empty[0], 1, 1, "backend", "got an empty value");
}

TEST(Errors, BadSizeUnitSuggestsTheNearest) {
  const auto d = diagnostics_of("cache:\n  capacity: 2Gib\n");
  ASSERT_EQ(d.size(), 1u);
  expect_error(d[0], 2, 13, "cache.capacity", "unknown size unit 'Gib' in '2Gib'");
  EXPECT_NE(d[0].message.find("(did you mean 'GiB'?)"), std::string::npos) << d[0].message;
  const auto zero = diagnostics_of("cache: {capacity: 0}\n");
  ASSERT_EQ(zero.size(), 1u);
  expect_error(zero[0], 1, 19, "cache.capacity", "expected a size greater than zero, got '0'");
}

TEST(Errors, PageSizeMustBeAPowerOfTwoUpTo1024) {
  const auto d = diagnostics_of("cache:\n  page_size: 24\n");
  ASSERT_EQ(d.size(), 1u);
  expect_error(d[0], 2, 14, "cache.page_size", "expected a power of two from 1 to 1024, got '24'");
  EXPECT_EQ(diagnostics_of("cache: {page_size: 2048}").size(), 1u);
  EXPECT_EQ(parse_config("cache: {page_size: 1}", "t", kNoEnv).cache.page_size, 1u);
  EXPECT_EQ(parse_config("cache: {page_size: 1024}", "t", kNoEnv).cache.page_size, 1024u);
}

TEST(Errors, QueryHeadsMustBeAMultipleOfKvHeads) {
  const auto d = diagnostics_of("model:\n  q_heads: 30\n  kv_heads: 8\n");
  ASSERT_EQ(d.size(), 1u);
  expect_error(d[0], 3, 13, "model.kv_heads", "q_heads (30) must be a multiple of kv_heads (8)");
  // When only q_heads is in the file, it is what the user has to fix.
  const auto q_only = diagnostics_of("model: {q_heads: 12}\n");
  ASSERT_EQ(q_only.size(), 1u);
  expect_error(q_only[0], 1, 18, "model.q_heads", "must be a multiple of kv_heads (8)");
}

TEST(Errors, MissingComponentName) {
  const auto d = diagnostics_of("mask: {sinks: 4, window: 64}\n");
  ASSERT_EQ(d.size(), 1u);
  expect_error(d[0], 1, 7, "mask", "missing key 'name'");
  const auto v = diagnostics_of("quantizer:\n  v: {group: 64}\n");
  ASSERT_EQ(v.size(), 1u);
  expect_error(v[0], 2, 6, "quantizer.v", "missing key 'name'");
  const auto path = diagnostics_of("plugins: {paths: [{required: true}]}\n");
  ASSERT_EQ(path.size(), 1u);
  expect_error(path[0], 1, 19, "plugins.paths[0]", "missing key 'path'");
}

TEST(Errors, DuplicateKey) {
  const auto d = diagnostics_of("cache:\n  page_size: 16\n  page_size: 32\n");
  ASSERT_EQ(d.size(), 1u);
  expect_error(d[0], 3, 3, "cache", "duplicate key 'page_size' (first given on line 2)");
}

TEST(Errors, EveryErrorInOneFileIsReported) {
  const std::string yaml =
      "modle: {layers: 2}\n"             // 1
      "cache:\n"                         // 2
      "  page_size: 24\n"                // 3
      "  capacity: 2 GIB\n"              // 4
      "  prefix_caching: yes\n"          // 5
      "model:\n"                         // 6
      "  layers: many\n"                 // 7
      "  q_heads: 12\n"                  // 8
      "  kv_heads: 5\n"                  // 9
      "quantizer: [int8]\n"              // 10
      "eviction: {window: 4}\n"          // 11
      "plugins: {paths: [[nested]]}\n";  // 12
  const auto d = diagnostics_of(yaml);
  ASSERT_EQ(d.size(), 9u);
  expect_error(d[0], 1, 1, "", "unknown key 'modle'");
  expect_error(d[1], 3, 14, "cache.page_size", "power of two");
  expect_error(d[2], 4, 13, "cache.capacity", "(did you mean 'GiB'?)");
  expect_error(d[3], 5, 19, "cache.prefix_caching", "expected true or false, got 'yes'");
  expect_error(d[4], 7, 11, "model.layers", "expected a positive integer, got 'many'");
  expect_error(d[5], 10, 12, "quantizer", "got a list");
  expect_error(d[6], 11, 11, "eviction", "missing key 'name'");
  expect_error(d[7], 12, 19, "plugins.paths[0]", "expected a path or a mapping");
  // The cross-key check runs on the values that did read.
  expect_error(d[8], 9, 13, "model.kv_heads", "q_heads (12) must be a multiple of kv_heads (5)");
}

TEST(Errors, YamlSyntaxErrorIsLocated) {
  const auto d = diagnostics_of("model:\n  layers: 32\n   q_heads: 4\n");
  ASSERT_EQ(d.size(), 1u);
  expect_error(d[0], 3, 11, "", "illegal map value");
  const auto flow = diagnostics_of("cache:\n  page_size: 16\n  capacity: [1GiB\n");
  ASSERT_EQ(flow.size(), 1u);
  expect_error(flow[0], 4, 1, "", "end of sequence flow not found");
}

TEST(Errors, ConfigErrorListsEveryDiagnosticOnItsOwnLine) {
  try {
    parse_config("cache: {page_size: 3}\nmask: []\n", "f.yaml", kNoEnv);
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.diagnostics().size(), 2u);
    EXPECT_EQ(std::string(e.what()),
              to_string(e.diagnostics()[0]) + "\n" + to_string(e.diagnostics()[1]));
    EXPECT_EQ(to_string(e.diagnostics()[0]),
              "f.yaml:1:20: error: cache.page_size: expected a power of two from 1 to 1024, "
              "got '3'");
  }
}

TEST(Environment, OverridesSingleKeys) {
  const Environment env = {
      {"KVCACHE_MODEL_LAYERS", "40"},
      {"KVCACHE_MODEL_Q_HEADS", "64"},
      {"KVCACHE_MODEL_KV_HEADS", "16"},
      {"KVCACHE_MODEL_HEAD_DIM", "64"},
      {"KVCACHE_CACHE_PAGE_SIZE", "64"},
      {"KVCACHE_CACHE_CAPACITY", "512 MiB"},
      {"KVCACHE_CACHE_PREFIX_CACHING", "false"},
      {"KVCACHE_QUANTIZER_K", "int8-per-token"},
      {"KVCACHE_QUANTIZER_V", "int4-group"},
      {"KVCACHE_MASK", "sliding-window"},
      {"KVCACHE_EVICTION", "streaming"},
  };
  const Config c = parse_config(
      "cache: {page_size: 32}\nmask: {name: sink-window, sinks: 4}\n"
      "quantizer: {v: {name: int4-group, group: 32}}\n",
      "test.yaml", env);
  EXPECT_EQ(c.model, (ModelShape{40, 64, 16, 64}));
  EXPECT_EQ(c.cache.page_size, 64u);
  EXPECT_EQ(c.cache.capacity_bytes, 512 * kMiB);
  EXPECT_FALSE(c.cache.prefix_caching);
  EXPECT_EQ(c.k_format.name, "int8-per-token");
  EXPECT_EQ(c.v_format.name, "int4-group");
  EXPECT_EQ(c.v_format.options, nlohmann::json::object());
  EXPECT_EQ(c.mask.name, "sliding-window");
  EXPECT_EQ(c.mask.options, nlohmann::json::object());
  EXPECT_EQ(c.mask.where.origin, "environment variable KVCACHE_MASK");
  EXPECT_EQ(c.mask.where.line, 0);
  EXPECT_EQ(c.eviction.name, "streaming");
  EXPECT_TRUE(c.warnings.empty());
}

TEST(Environment, AppliesToTheDefaultToo) {
  const Config c = default_config({{"KVCACHE_CACHE_PAGE_SIZE", "128"}});
  EXPECT_EQ(c.cache.page_size, 128u);
  EXPECT_EQ(c.origin, "<embedded default>");
}

TEST(Environment, BackendIsACommaSeparatedList) {
  const Config c = default_config({{"KVCACHE_BACKEND", "cpu-tbb, cuda"}});
  EXPECT_EQ(c.backend_names(), (std::vector<std::string>{"cpu-tbb", "cuda"}));
  EXPECT_EQ(c.backends_where.origin, "environment variable KVCACHE_BACKEND");
  EXPECT_EQ(c.backends_where.line, 0);
  EXPECT_EQ(c.backends[1].where.origin, "environment variable KVCACHE_BACKEND");
  // It replaces the file's list whole, options included, as KVCACHE_MASK replaces a mask.
  const Config over = parse_config("backend: [{name: cpu-tbb, threads: 1}]\n", "test.yaml",
                                   {{"KVCACHE_BACKEND", "cpu-tbb"}});
  ASSERT_EQ(over.backends.size(), 1u);
  EXPECT_TRUE(over.backends[0].options.empty());
}

TEST(Environment, PluginPathIsColonSeparatedAndSkipsEmptyEntries) {
  const Config c = default_config({{"KVCACHE_PLUGIN_PATH", "/a/plugins::/b/x.so:"}});
  EXPECT_EQ(c.plugins.env_paths, (std::vector<std::string>{"/a/plugins", "/b/x.so"}));
}

TEST(Environment, BadValueNamesTheVariable) {
  try {
    default_config({{"KVCACHE_CACHE_PAGE_SIZE", "abc"}, {"KVCACHE_BACKEND", " , "}});
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.diagnostics().size(), 2u);
    const Diagnostic& backend = e.diagnostics()[0];
    EXPECT_EQ(backend.where.origin, "environment variable KVCACHE_BACKEND");
    EXPECT_EQ(backend.key, "backend");
    const Diagnostic& page = e.diagnostics()[1];
    EXPECT_EQ(page.where.origin, "environment variable KVCACHE_CACHE_PAGE_SIZE");
    EXPECT_EQ(page.where.line, 0);
    EXPECT_EQ(to_string(page),
              "environment variable KVCACHE_CACHE_PAGE_SIZE: error: cache.page_size: expected a "
              "positive integer, got 'abc'");
  }
  EXPECT_EQ(diagnostics_of("", {{"KVCACHE_CACHE_CAPACITY", "2Gib"}}).size(), 1u);
  EXPECT_EQ(diagnostics_of("", {{"KVCACHE_CACHE_PREFIX_CACHING", "1"}}).size(), 1u);
  EXPECT_EQ(diagnostics_of("", {{"KVCACHE_MASK", ""}}).size(), 1u);
}

TEST(Environment, ErrorsInFileAndEnvironmentAreReportedTogether) {
  const auto d = diagnostics_of("cache: {page_size: 3}\n", {{"KVCACHE_MODEL_LAYERS", "-1"}});
  ASSERT_EQ(d.size(), 2u);
  expect_error(d[0], 1, 20, "cache.page_size", "power of two");
  EXPECT_EQ(d[1].where.origin, "environment variable KVCACHE_MODEL_LAYERS");
}

TEST(Environment, UnknownVariableIsAWarning) {
  const Config c = default_config({{"KVCACHE_BACKENDS", "cuda"},
                                   {"KVCACHE_WHATEVER", "1"},
                                   {"KVCACHE_LOG_LEVEL", "debug"},
                                   {"KVCACHE_CPU_NO_VNNI", "1"},
                                   {"KVCACHE_CPU_NO_VBMI", "1"},
                                   {"KVCACHE_CPU_ISA", "avx2"},
                                   {"HOME", "/root"}});
  EXPECT_EQ(c.backend_names(), default_config(kNoEnv).backend_names());
  ASSERT_EQ(c.warnings.size(), 2u);
  EXPECT_EQ(c.warnings[0].severity, Diagnostic::Severity::warning);
  EXPECT_EQ(c.warnings[0].where.origin, "environment variable KVCACHE_BACKENDS");
  EXPECT_EQ(c.warnings[0].message,
            "unknown variable KVCACHE_BACKENDS (did you mean KVCACHE_BACKEND?)");
  EXPECT_EQ(c.warnings[1].message, "unknown variable KVCACHE_WHATEVER");
}

TEST(Environment, ProcessEnvironmentHoldsOnlyKvcacheVariables) {
  ASSERT_EQ(setenv("KVCACHE_CONFIG_TEST_VARIABLE", "a=b", 1), 0);
  ASSERT_EQ(setenv("NOT_KVCACHE_CONFIG_TEST", "x", 1), 0);
  const Environment env = process_environment();
  unsetenv("KVCACHE_CONFIG_TEST_VARIABLE");
  unsetenv("NOT_KVCACHE_CONFIG_TEST");
  ASSERT_EQ(env.count("KVCACHE_CONFIG_TEST_VARIABLE"), 1u);
  EXPECT_EQ(env.at("KVCACHE_CONFIG_TEST_VARIABLE"), "a=b");
  for (const auto& [name, value] : env) EXPECT_EQ(name.rfind("KVCACHE_", 0), 0u) << name;
}

TEST(ToYaml, RoundTrips) {
  const Config original = parse_config(
      "model: {layers: 80, q_heads: 64, kv_heads: 8, head_dim: 128}\n"
      "backend: [cpu-tbb]\n"
      "cache: {page_size: 64, capacity: 1.5GB, prefix_caching: false}\n"
      "quantizer: {k: int8-per-token, v: {name: int4-group, group: 64, symmetric: false}}\n"
      "mask:\n"
      "  name: sink-window\n"
      "  sinks: 4\n"
      "  scale: 0.125\n"
      "  tiny: 1e-7\n"
      "  whole: 2.0\n"
      "  text: \"true\"\n"
      "  number_text: '42'\n"
      "  empty: ''\n"
      "  none: ~\n"
      "  null_text: \"null\"\n"
      "  list: [1, two, [3]]\n"
      "  map: {a: {b: c}}\n"
      "eviction: none\n"
      "plugins:\n"
      "  paths: [/opt/p, {path: '/opt/q: odd #name.so', required: true}]\n"
      "  required: [kvcache-cpu-tbb]\n",
      "original.yaml", {{"KVCACHE_PLUGIN_PATH", "/env/only"}});
  const std::string yaml = to_yaml(original);
  SCOPED_TRACE(yaml);
  const Config again = parse_config(yaml, "again.yaml", kNoEnv);
  expect_same_values(original, again);
  EXPECT_EQ(again.cache.capacity_bytes, 1'500'000'000u);
  EXPECT_TRUE(again.mask.options["whole"].is_number_float());
  EXPECT_TRUE(again.mask.options["text"].is_string());
  EXPECT_TRUE(again.plugins.env_paths.empty());
  EXPECT_NE(yaml.find("capacity: 1500000000B"), std::string::npos);
}

TEST(ToYaml, RopeRoundTrips) {
  const Config original = parse_config(
      "model:\n"
      "  preset: llama-3.1-8b\n"
      "  rope: {dims: 64, style: gptj}\n",
      "original.yaml", kNoEnv);
  ASSERT_TRUE(original.rope);
  EXPECT_EQ(original.rope->scaling.kind, RopeScaling::Kind::llama3);
  const Config again = parse_config(to_yaml(original), "again.yaml", kNoEnv);
  expect_same_values(original, again);
}

TEST(ToYaml, RemoteRoundTrips) {
  const Config original = parse_config(
      "remote: {transport: memory, endpoints: [a, b], model: \"m: 1\", write: {queue: 1MiB},\n"
      "         namespace: {label: t, salt_env: S}, read: {min_pages: 3}}\n",
      "original.yaml", kNoEnv);
  const Config again = parse_config(to_yaml(original), "again.yaml", kNoEnv);
  expect_same_values(original, again);
}

// An entry with options is written as a mapping, one without as a bare name.
TEST(ToYaml, BackendOptionsRoundTrip) {
  const Config original = parse_config(
      "backend: [{name: cpu-tbb, threads: 1}, cuda, {name: hip, device: 2, tag: '7'}]\n",
      "original.yaml", kNoEnv);
  const std::string yaml = to_yaml(original);
  SCOPED_TRACE(yaml);
  EXPECT_NE(yaml.find("backend: [{name: cpu-tbb, threads: 1}, cuda, {name: hip, device: 2, tag: "
                      "\"7\"}]"),
            std::string::npos);
  const Config again = parse_config(yaml, "again.yaml", kNoEnv);
  expect_same_values(original, again);
  ASSERT_EQ(again.backends.size(), 3u);
  EXPECT_TRUE(again.backends[2].options["tag"].is_string());
}

TEST(ToYaml, DefaultRoundTripsAndIsReadable) {
  const Config defaults = default_config(kNoEnv);
  const std::string yaml = to_yaml(defaults);
  SCOPED_TRACE(yaml);
  expect_same_values(defaults, parse_config(yaml, "again.yaml", kNoEnv));
  EXPECT_NE(yaml.find("capacity: 2GiB"), std::string::npos);
  EXPECT_NE(yaml.find("backend: [cuda, hip, cpu-tbb]"), std::string::npos);
}

class LoadConfig : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvcache_config_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(LoadConfig, ReadsAFile) {
  const std::filesystem::path file = dir_ / "kv.yaml";
  std::ofstream(file) << "cache:\n  page_size: 8\n";
  const Config c = load_config(file, kNoEnv);
  EXPECT_EQ(c.origin, file.string());
  EXPECT_EQ(c.cache.page_size, 8u);
}

TEST_F(LoadConfig, ErrorsNameTheFile) {
  const std::filesystem::path file = dir_ / "bad.yaml";
  std::ofstream(file) << "cache:\n  page_size: 7\n";
  try {
    load_config(file, kNoEnv);
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.diagnostics().size(), 1u);
    EXPECT_EQ(to_string(e.diagnostics()[0].where), file.string() + ":2:14");
  }
}

TEST_F(LoadConfig, MissingFileIsAConfigErrorNamingIt) {
  const std::filesystem::path file = dir_ / "missing.yaml";
  try {
    load_config(file, kNoEnv);
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.diagnostics().size(), 1u);
    EXPECT_EQ(e.diagnostics()[0].where.origin, file.string());
    EXPECT_EQ(e.diagnostics()[0].message,
              "cannot read config file '" + file.string() + "': No such file or directory");
  }
}

TEST_F(LoadConfig, DirectoryIsAConfigError) {
  try {
    load_config(dir_, kNoEnv);
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.diagnostics().size(), 1u);
    EXPECT_NE(e.diagnostics()[0].message.find("Is a directory"), std::string::npos);
  }
}

// read_config: a file, a YAML text, or the embedded default. A text longer than a file name may
// be (here 4 KiB) is YAML, not a filesystem error.
TEST_F(LoadConfig, ReadConfigTakesAFileATextOrNothing) {
  EXPECT_EQ(read_config("", kNoEnv).origin, "<embedded default>");
  std::string text = "cache: {page_size: 32}\n";
  text.append(4096, ' ');
  const Config long_text = read_config(text, kNoEnv);
  EXPECT_EQ(long_text.origin, "<yaml text>");
  EXPECT_EQ(long_text.cache.page_size, 32u);
}

}  // namespace
}  // namespace kvcache
