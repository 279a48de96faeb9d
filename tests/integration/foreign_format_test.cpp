// A storage format that no backend knows (tests/out_of_tree/nf4_format.cpp, built here as a test
// plugin) runs through the Cache on cpu-tbb by its own codec; a backend that runs only its own
// formats refuses it by name, in Cache::open and in the config check; and a format with a flaw
// (tests/plugins/flawed_formats.cpp) is refused when the store is created, named with its flaw.
#include <cmath>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvcache/cache.hpp"
#include "kvcache/config.hpp"
#include "kvcache/host_tensor.hpp"
#include "kvcache/reference_attention.hpp"
#include "kvcache/registry.hpp"

namespace kvcache {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::shared_ptr<const Registry> registry() {
  static const auto r = [] {
    PluginSettings settings;
    for (const char* file :
         {KVCACHE_TEST_NF4_PLUGIN, KVCACHE_TEST_FLAWED_FORMATS_PLUGIN, KVCACHE_TEST_GPU_EMULATOR})
      settings.paths.push_back({file, true, {}});
    return Registry::load(settings);
  }();
  return r;
}

Config config_with(const std::string& backend, const std::string& k, const std::string& v) {
  return parse_config(
      "model: {layers: 2, q_heads: 4, kv_heads: 2, head_dim: 64}\n"
      "backend: [" +
          backend +
          "]\n"
          "cache: {page_size: 16, capacity: 4MiB}\n"
          "format: {k: " +
          k + ", v: " + v + "}\n",
      "test.yaml", {});
}

TEST(ForeignFormat, RunsThroughTheCacheOnCpuTbbByItsOwnCodec) {
  const Config config = config_with("cpu-tbb", "nf4", "{name: nf4, group: 16}");
  const auto cache = Cache::open(config, registry());
  const ModelShape& m = cache->model();
  const SeqId id = cache->add_sequence();
  constexpr std::uint32_t kTokens = 37;  // two full pages and part of a third
  const std::uint32_t counts[] = {kTokens};
  std::vector<float> k(kTokens * m.kv_heads * m.head_dim), v(k.size());
  for (std::size_t i = 0; i < k.size(); ++i) {
    k[i] = std::sin(0.1f * static_cast<float>(i));
    v[i] = std::cos(0.07f * static_cast<float>(i));
  }
  std::int64_t kv_shape[3] = {kTokens, m.kv_heads, m.head_dim};
  (void)cache->reserve(std::vector<SeqId>{id}, counts);
  for (std::uint32_t layer = 0; layer < m.layers; ++layer)
    cache->append(layer, std::vector<SeqId>{id}, counts, host_tensor(k.data(), kv_shape),
                  host_tensor(v.data(), kv_shape));

  // The store holds what nf4's own codec makes of the rows: gather decodes them back.
  std::vector<float> gk(k.size()), gv(v.size());
  DLTensor gkt = host_tensor(gk.data(), kv_shape), gvt = host_tensor(gv.data(), kv_shape);
  cache->store().gather(1, id, gkt, gvt);
  const auto k_codec = registry()->create_quantizer("nf4");
  const auto v_codec = registry()->create_quantizer("nf4", {{"group", 16}});
  for (const bool value : {false, true}) {
    const Quantizer& codec = value ? *v_codec : *k_codec;
    const std::vector<float>& in = value ? v : k;
    const std::vector<float>& got = value ? gv : gk;
    const TileLayout f = codec.describe(m.head_dim, 16);
    std::vector<std::byte> tile(f.tile_bytes);
    std::vector<float> row(m.head_dim), back(m.head_dim);
    std::int64_t row_shape[2] = {1, m.head_dim};
    for (std::uint32_t t = 0; t < kTokens; ++t)
      for (std::uint32_t h = 0; h < m.kv_heads; ++h) {
        const std::size_t at = (std::size_t{t} * m.kv_heads + h) * m.head_dim;
        std::copy_n(in.begin() + static_cast<std::ptrdiff_t>(at), m.head_dim, row.begin());
        codec.encode(host_tensor(row.data(), row_shape, 2), t % 16, 16, tile.data());
        DLTensor out = host_tensor(back.data(), row_shape, 2);
        codec.decode(tile.data(), t % 16, 16, out);
        for (std::uint32_t e = 0; e < m.head_dim; ++e)
          ASSERT_EQ(got[at + e], back[e]) << (value ? "V" : "K") << " token " << t << " head " << h;
      }
  }

  // Decode attention over the stored rows equals the reference over the decoded ones.
  std::vector<float> q(m.q_heads * m.head_dim), out(q.size(), NAN), want(q.size());
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.3f * static_cast<float>(i));
  std::int64_t q_shape[3] = {1, m.q_heads, m.head_dim};
  DLTensor ot = host_tensor(out.data(), q_shape);
  cache->decode(1, std::vector<SeqId>{id}, host_tensor(q.data(), q_shape), ot);
  std::vector<Position> positions(kTokens);
  for (std::uint32_t t = 0; t < kTokens; ++t) positions[t] = t;
  const std::vector<PositionRange> all = {{0, kTokens}};
  std::vector<float> weights;
  reference::attention({m.q_heads, m.kv_heads, m.head_dim}, q, gk, gv, positions, all,
                       1.0f / std::sqrt(static_cast<float>(m.head_dim)), want, weights);
  for (std::size_t e = 0; e < out.size(); ++e) EXPECT_NEAR(out[e], want[e], 1e-4) << e;
}

TEST(ForeignFormat, ConfigCheckAcceptsItForCpuTbb) {
  const Config config = config_with("cpu-tbb", "nf4", "int8-per-token");
  for (const Diagnostic& d : check_components(config, *registry()))
    EXPECT_NE(d.severity, Diagnostic::Severity::error) << to_string(d);
}

TEST(ForeignFormat, BackendThatRunsOnlyItsOwnFormatsRefusesItByName) {
  const Config config = config_with("gpu-emulated", "fp16", "nf4");
  try {
    (void)Cache::open(config, registry());
    FAIL() << "gpu-emulated opened a cache with nf4 values";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::unsupported);
    EXPECT_THAT(e.what(), AllOf(HasSubstr("format.v"), HasSubstr("gpu-emulated"),
                                HasSubstr("int8-per-token"), HasSubstr("'nf4'")));
  }
  bool refused = false;
  for (const Diagnostic& d : check_components(config, *registry())) {
    if (d.severity != Diagnostic::Severity::error) continue;
    refused = true;
    EXPECT_EQ(d.key, "format.v");
    EXPECT_EQ(d.where.line, 4) << to_string(d);  // the line that names the format
    EXPECT_THAT(d.message, AllOf(HasSubstr("gpu-emulated"), HasSubstr("nf4")));
  }
  EXPECT_TRUE(refused);
}

// Each flawed format is refused when its store is created, with its name and the flaw.
TEST(ForeignFormat, FlawedFormatsAreRefusedWhenTheStoreIsCreated) {
  const std::pair<const char*, const char*> flaws[] = {
      {"flawed-encode-throws", "encode is broken on purpose"},
      {"flawed-zero-tile", "its tile has 0 bytes"},
      {"flawed-writes-past-tile", "wrote past its tile"},
      {"flawed-huge-tile", "more than 8 bytes an element"},
      {"flawed-shared-slots", "not self-contained"},
      {"flawed-nan-decode", "non-finite"},
  };
  for (const auto& [name, flaw] : flaws) {
    const Config config = config_with("cpu-tbb", name, "fp16");
    try {
      (void)Cache::open(config, registry());
      ADD_FAILURE() << name << " was accepted";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), AllOf(HasSubstr(std::string("'") + name + "'"), HasSubstr(flaw)))
          << name;
    }
  }
  // Nothing was half-made: a sound cache opens and runs afterwards.
  const auto cache = Cache::open(config_with("cpu-tbb", "nf4", "fp16"), registry());
  EXPECT_EQ(cache->stats().used_pages, 0u);
}

}  // namespace
}  // namespace kvcache
