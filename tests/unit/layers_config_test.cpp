// The `layers:` section: groups of layers with their own mask and formats, laid over the model by
// a repeated pattern or by explicit ranges; every mistake is an error at the line it was made.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvcache/config.hpp"

namespace kvcache {
namespace {

const Environment kNoEnv;

std::vector<Diagnostic> diagnostics_of(const std::string& yaml, const Environment& env = kNoEnv) {
  try {
    parse_config(yaml, "test.yaml", env);
  } catch (const ConfigError& e) {
    return e.diagnostics();
  }
  ADD_FAILURE() << "no ConfigError for:\n" << yaml;
  return {};
}

void expect_error(const std::vector<Diagnostic>& d, int line, int column, const std::string& key,
                  const std::string& text) {
  std::string all;
  for (const Diagnostic& x : d) all += to_string(x) + "\n";
  ASSERT_EQ(d.size(), 1u) << all;
  EXPECT_EQ(d[0].where.origin, "test.yaml") << to_string(d[0]);
  EXPECT_EQ(d[0].where.line, line) << to_string(d[0]);
  EXPECT_EQ(d[0].where.column, column) << to_string(d[0]);
  EXPECT_EQ(d[0].key, key) << to_string(d[0]);
  EXPECT_NE(d[0].message.find(text), std::string::npos) << to_string(d[0]);
}

std::vector<std::uint32_t> every(std::uint32_t from, std::uint32_t step, std::uint32_t below) {
  std::vector<std::uint32_t> out;
  for (std::uint32_t i = from; i < below; i += step) out.push_back(i);
  return out;
}

const std::string kGemma =
    "model: {layers: 62, q_heads: 32, kv_heads: 16, head_dim: 128}\n"
    "layers:\n"
    "  groups:\n"
    "    local: {mask: {name: sliding-window, window: 1024}}\n"
    "    global: {format: int8-per-token}\n"
    "  pattern: [local x5, global]\n";

TEST(Layers, APatternRepeatsOverTheLayers) {
  const Config c = parse_config(kGemma, "test.yaml", kNoEnv);
  ASSERT_EQ(c.layer_groups.size(), 2u);
  const LayerGroup &local = c.layer_groups[0], &global = c.layer_groups[1];
  EXPECT_EQ(global.name, "global");
  EXPECT_EQ(global.layers, every(5, 6, 62));  // 5, 11, ..., 59
  EXPECT_EQ(local.layers.size(), 52u);
  EXPECT_EQ(local.layers.back(), 61u);
  EXPECT_EQ(local.mask.name, "sliding-window");
  EXPECT_EQ(local.mask.options.at("window"), 1024);
  // What a group does not name is the top-level section's.
  EXPECT_EQ(global.mask.name, c.mask.name);
  EXPECT_EQ(local.k_format.name, c.k_format.name);
  EXPECT_EQ(global.k_format.name, "int8-per-token");
  EXPECT_EQ(global.v_format.name, "int8-per-token");
}

TEST(Layers, AStringPatternAndExplicitRangesSayTheSame) {
  const Config a = parse_config(
      "model: {layers: 6}\n"
      "layers:\n"
      "  groups: {even: {mask: {name: sliding-window, window: 128}}, odd: }\n"
      "  pattern: \"even, odd\"\n",
      "test.yaml", kNoEnv);
  const Config b = parse_config(
      "model: {layers: 6}\n"
      "layers:\n"
      "  groups:\n"
      "    even: {mask: {name: sliding-window, window: 128}, layers: [0, 2, \"4-4\"]}\n"
      "    odd: {layers: \"1, 3-3, 5\"}\n",
      "test.yaml", kNoEnv);
  for (const Config* c : {&a, &b}) {
    ASSERT_EQ(c->layer_groups.size(), 2u);
    EXPECT_EQ(c->layer_groups[0].layers, every(0, 2, 6));
    EXPECT_EQ(c->layer_groups[1].layers, every(1, 2, 6));
  }
}

TEST(Layers, GroupsTakeTheTopLevelChoicesOfEverySource) {
  // The environment's mask arrives after the file: a group without a mask takes it.
  const Config c = parse_config(kGemma, "test.yaml", {{"KVCACHE_MASK", "chunked"}});
  EXPECT_EQ(c.layer_groups[1].mask.name, "chunked");
  EXPECT_EQ(c.layer_groups[0].mask.name, "sliding-window");
}

TEST(Layers, OneGroupForEveryLayerIsTheUniformCase) {
  const Config c = parse_config(
      "layers: {groups: {all: {mask: {name: sliding-window, window: 64}, format: fp16}}, "
      "pattern: [all]}\n",
      "test.yaml", kNoEnv);
  EXPECT_TRUE(c.layer_groups.empty());
  EXPECT_EQ(c.mask.name, "sliding-window");
  EXPECT_EQ(c.k_format.name, "fp16");
}

TEST(Layers, TheWrittenConfigReadsBackTheSame) {
  const Config c = parse_config(kGemma, "test.yaml", kNoEnv);
  const Config back = parse_config(to_yaml(c), "written.yaml", kNoEnv);
  ASSERT_EQ(back.layer_groups.size(), c.layer_groups.size());
  for (std::size_t i = 0; i < c.layer_groups.size(); ++i) {
    const LayerGroup &x = c.layer_groups[i], &y = back.layer_groups[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.layers, y.layers);
    EXPECT_EQ(x.mask.name, y.mask.name);
    EXPECT_EQ(x.mask.options, y.mask.options);
    EXPECT_EQ(x.k_format.name, y.k_format.name);
    EXPECT_EQ(x.v_format.name, y.v_format.name);
  }
}

TEST(LayersErrors, AnUnknownGroupInThePatternNamesTheNearest) {
  expect_error(
      diagnostics_of("layers: {groups: {local: , global: }, pattern: [local x5, globl]}\n"), 1, 59,
      "layers.pattern", "unknown group 'globl' (did you mean 'global'?)");
}

TEST(LayersErrors, ABadCountOrRangeIsRefusedAtItsEntry) {
  expect_error(diagnostics_of("layers:\n  groups: {a: , b: }\n  pattern: [a x0, b]\n"), 3, 13,
               "layers.pattern[0]", "got 'a x0'");
  expect_error(diagnostics_of("layers:\n  groups: {a: {layers: \"3-1\"}, b: }\n"), 2, 24,
               "layers.groups.a.layers", "got '3-1'");
}

TEST(LayersErrors, LayersLeftOutAreNamed) {
  expect_error(diagnostics_of("model: {layers: 62}\n"
                              "layers:\n"
                              "  groups:\n"
                              "    local: {layers: \"0-4, 6-10\"}\n"
                              "    global: {layers: [5, 11-59]}\n"),
               3, 3, "layers", "layers 60-61 are in no group (the model has 62 layers)");
  expect_error(diagnostics_of("model: {layers: 62}\n"
                              "layers:\n"
                              "  groups:\n"
                              "    local: {layers: \"0-4, 6-10, 12-61\"}\n"
                              "    global: {layers: [5]}\n"),
               3, 3, "layers", "layer 11 is in no group");
}

TEST(LayersErrors, OverlapsAndLayersPastTheModelAreRefused) {
  expect_error(diagnostics_of("model: {layers: 8}\n"
                              "layers:\n"
                              "  groups:\n"
                              "    a: {layers: \"0-4\"}\n"
                              "    b: {layers: \"4-7\"}\n"),
               5, 17, "layers.groups.b.layers", "layer 4 is already in group 'a'");
  expect_error(diagnostics_of("model: {layers: 8}\n"
                              "layers:\n"
                              "  groups: {a: {layers: \"0-3\"}, b: {layers: [4-8]}}\n"),
               3, 45, "layers.groups.b.layers", "layer 8 is past the model's 8 layers (0-7)");
}

TEST(LayersErrors, AGroupWithoutLayersOrBothWaysOfSayingThemAreRefused) {
  expect_error(diagnostics_of("layers:\n  groups: {a: , b: }\n  pattern: [a]\n"), 2, 17,
               "layers.groups.b", "group 'b' holds no layer");
  expect_error(diagnostics_of("layers:\n  groups: {a: {layers: \"0\"}, b: }\n  pattern: [a, b]\n"),
               2, 3, "layers", "either layers.pattern or each group's layers");
  expect_error(diagnostics_of("layers:\n  groups: {a: , b: }\n"), 2, 3, "layers",
               "say which layers each group holds");
}

TEST(LayersErrors, AMisspeltKeyOfAGroupNamesTheNearest) {
  expect_error(diagnostics_of("layers:\n  groups: {a: {mak: causal}, b: }\n  pattern: [a, b]\n"), 2,
               16, "layers.groups.a", "did you mean 'mask'");
}

}  // namespace
}  // namespace kvcache
