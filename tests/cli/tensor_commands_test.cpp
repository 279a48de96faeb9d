// `kvcache quantize` and `kvcache attention` run as a user would (the real binary, files on
// disk), their outputs checked against the reference formulas.
#include <unistd.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvcache/formats.hpp"
#include "kvcache/reference_attention.hpp"
#include "tensor_file.hpp"

namespace kvcache::tool {
namespace {

namespace fs = std::filesystem;

// One folder per test process: ctest runs the tests of this file in parallel processes.
fs::path scratch() {
  const fs::path dir =
      fs::temp_directory_path() / ("kvcache-tensor-commands-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

// A float32 .npy (version 1.0, C order), written the way NumPy does.
void write_npy(const fs::path& file, const std::vector<std::int64_t>& shape,
               const std::vector<float>& values, const std::string& descr = "<f4") {
  std::string dims;
  for (std::int64_t d : shape) dims += std::to_string(d) + ",";
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header += '\n';
  std::ofstream out(file, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const std::uint16_t length = static_cast<std::uint16_t>(header.size());
  out.write(reinterpret_cast<const char*>(&length), 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(values.data()),
            static_cast<std::streamsize>(values.size() * 4));
}

std::vector<float> random_values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// Runs the tool; returns its exit code and what it printed.
std::pair<int, std::string> kvcache(const std::string& args) {
  const fs::path log = scratch() / "log.txt";
  const std::string command =
      std::string(KVCACHE_TOOL) + " " + args + " > " + log.string() + " 2>&1";
  const int status = std::system(command.c_str());
  std::ifstream in(log);
  return {WEXITSTATUS(status), std::string(std::istreambuf_iterator<char>(in), {})};
}

TEST(TensorCommands, QuantizeInt8GivesTheSeedsCodesAndScales) {
  const fs::path in = scratch() / "x.npy", out = scratch() / "x_int8.safetensors";
  const std::vector<float> x = random_values(2 * 3 * 64, 1);
  write_npy(in, {2, 3, 64}, x);
  const auto [code, text] =
      kvcache("quantize --format int8-per-token --in " + in.string() + " --out " + out.string());
  ASSERT_EQ(code, 0) << text;
  const auto t = read_tensors(out);
  ASSERT_EQ(t.at("codes").dtype, "I8");
  EXPECT_EQ(t.at("codes").shape, (std::vector<std::int64_t>{2, 3, 64}));
  EXPECT_EQ(t.at("scales").shape, (std::vector<std::int64_t>{2, 3, 1}));
  const std::vector<float> scales = t.at("scales").to_float("scales");
  const std::vector<float> deq = t.at("dequantized").to_float("dequantized");
  for (std::size_t row = 0; row < 6; ++row) {
    float amax = 0;
    for (int i = 0; i < 64; ++i) amax = std::max(amax, std::fabs(x[row * 64 + i]));
    const float scale = std::max(amax / 127.0f, 1e-8f);
    ASSERT_EQ(scales[row], scale);
    for (int i = 0; i < 64; ++i) {
      const auto c = static_cast<std::int8_t>(t.at("codes").data[row * 64 + i]);
      ASSERT_EQ(c, static_cast<std::int8_t>(std::nearbyint(x[row * 64 + i] / scale)));
      ASSERT_EQ(deq[row * 64 + i], static_cast<float>(c) * scale);
    }
  }
}

TEST(TensorCommands, QuantizeInt4WritesZerosAndKiviWantsWholeGroups) {
  const fs::path in = scratch() / "y.npy", out = scratch() / "y_int4.safetensors";
  write_npy(in, {5, 64}, random_values(5 * 64, 2));
  auto [code, text] = kvcache("quantize --format int4-group --group 32 --in " + in.string() +
                              " --out " + out.string());
  ASSERT_EQ(code, 0) << text;
  const auto t = read_tensors(out);
  EXPECT_EQ(t.at("codes").shape, (std::vector<std::int64_t>{5, 32}));
  EXPECT_EQ(t.at("scales").shape, (std::vector<std::int64_t>{5, 2}));
  EXPECT_EQ(t.at("zeros").dtype, "F16");
  std::tie(code, text) =
      kvcache("quantize --format kivi-k --group 4 --in " + in.string() + " --out " + out.string());
  EXPECT_NE(code, 0);
  EXPECT_THAT(text, ::testing::HasSubstr("whole groups of 4 rows"));
  std::tie(code, text) =
      kvcache("quantize --format int8-per-tokn --in " + in.string() + " --out " + out.string());
  EXPECT_NE(code, 0);
  EXPECT_THAT(text, ::testing::HasSubstr("did you mean 'int8-per-token'"));
  // --scheme, the old name, still works and says so.
  std::tie(code, text) =
      kvcache("quantize --scheme int4-group --in " + in.string() + " --out " + out.string());
  EXPECT_EQ(code, 0) << text;
  EXPECT_THAT(text, ::testing::HasSubstr("--scheme is deprecated; use --format"));
  std::tie(code, text) = kvcache("quantize --in " + in.string() + " --out " + out.string());
  EXPECT_NE(code, 0);
  EXPECT_THAT(text, ::testing::HasSubstr("--format is required"));
}

TEST(TensorCommands, AttentionMatchesTheReferenceWithGqaAndAMask) {
  const std::int64_t qh = 8, kvh = 2, d = 32, q_len = 5, kv_len = 40;
  const std::vector<float> q = random_values(qh * q_len * d, 3),
                           k = random_values(kvh * kv_len * d, 4),
                           v = random_values(kvh * kv_len * d, 5);
  write_npy(scratch() / "q.npy", {qh, q_len, d}, q);
  write_npy(scratch() / "k.npy", {kvh, kv_len, d}, k);
  write_npy(scratch() / "v.npy", {kvh, kv_len, d}, v);
  for (const std::string format : {"fp32", "int8-per-token"}) {
    const fs::path out = scratch() / ("out_" + format + ".safetensors");
    const auto [code, text] =
        kvcache("attention --q " + (scratch() / "q.npy").string() + " --k " +
                (scratch() / "k.npy").string() + " --v " + (scratch() / "v.npy").string() +
                " --mask sink-window:2:8 --k-format " + format + " --v-format " + format +
                " --out " + out.string());
    ASSERT_EQ(code, 0) << text;
    const auto t = read_tensors(out);
    ASSERT_EQ(t.at("out").shape, (std::vector<std::int64_t>{qh, q_len, d}));
    const std::vector<float> got = t.at("out").to_float("out");
    // Reference: keys as [kv_len][kv_heads][dim], the queries at the last q_len positions.
    std::vector<float> keys(k.size()), values(v.size());
    for (std::int64_t h = 0; h < kvh; ++h)
      for (std::int64_t p = 0; p < kv_len; ++p)
        for (std::int64_t i = 0; i < d; ++i) {
          keys[(p * kvh + h) * d + i] = k[(h * kv_len + p) * d + i];
          values[(p * kvh + h) * d + i] = v[(h * kv_len + p) * d + i];
        }
    std::vector<Position> positions(kv_len);
    for (std::int64_t p = 0; p < kv_len; ++p) positions[p] = p;
    for (std::int64_t j = 0; j < q_len; ++j) {
      const Position pos = kv_len - q_len + j;
      std::vector<float> qrow(qh * d), want(qh * d);
      for (std::int64_t h = 0; h < qh; ++h)
        for (std::int64_t i = 0; i < d; ++i) qrow[h * d + i] = q[(h * q_len + j) * d + i];
      const std::vector<PositionRange> visible{{0, 2}, {pos - 7, pos + 1}};
      reference::attention({static_cast<std::uint32_t>(qh), static_cast<std::uint32_t>(kvh),
                            static_cast<std::uint32_t>(d)},
                           qrow, keys, values, positions, visible, 1.0f / std::sqrt(float(d)),
                           want);
      for (std::int64_t h = 0; h < qh; ++h)
        for (std::int64_t i = 0; i < d; ++i)
          ASSERT_NEAR(got[(h * q_len + j) * d + i], want[h * d + i], format == "fp32" ? 1e-4 : 3e-2)
              << format;
    }
  }
}

// A format from a plugin (the nf4 example, on KVCACHE_PLUGIN_PATH) is a format like the built-in
// ones to both tensor commands: quantize writes its slots' bytes, attention stores K and V in it.
TEST(TensorCommands, BothTakeAFormatFromAPlugin) {
  ::setenv("KVCACHE_PLUGIN_PATH", KVCACHE_TEST_NF4_PLUGIN, 1);
  const fs::path in = scratch() / "n.npy", out = scratch() / "n_nf4.safetensors";
  const std::vector<float> x = random_values(40 * 64, 8);
  write_npy(in, {40, 64}, x);
  auto [code, text] =
      kvcache("quantize --format nf4 --in " + in.string() + " --out " + out.string());
  ASSERT_EQ(code, 0) << text;
  auto t = read_tensors(out);
  EXPECT_EQ(t.at("codes").dtype, "U8");
  EXPECT_EQ(t.at("codes").shape[0], 40);
  const std::vector<float> deq = t.at("dequantized").to_float("dequantized");
  double err = 0, mag = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    err += std::fabs(deq[i] - x[i]), mag += std::fabs(x[i]);
  EXPECT_LT(err / mag, 0.15) << "nf4 is a 4-bit format";
  EXPECT_GT(err / mag, 0.0) << "nothing was quantized";

  const fs::path q = scratch() / "nq.npy", k = scratch() / "nk.npy", v = scratch() / "nv.npy",
                 o = scratch() / "no.safetensors";
  write_npy(q, {4, 1, 64}, random_values(4 * 64, 9));
  write_npy(k, {2, 40, 64}, random_values(2 * 40 * 64, 10));
  write_npy(v, {2, 40, 64}, random_values(2 * 40 * 64, 11));
  std::tie(code, text) =
      kvcache("attention --q " + q.string() + " --k " + k.string() + " --v " + v.string() +
              " --out " + o.string() + " --k-format nf4 --v-format nf4 --backend cpu-tbb");
  ASSERT_EQ(code, 0) << text;
  EXPECT_THAT(text, ::testing::HasSubstr("K nf4, V nf4"));
  EXPECT_EQ(read_tensors(o).at("out").shape, (std::vector<std::int64_t>{4, 1, 64}));
  ::unsetenv("KVCACHE_PLUGIN_PATH");
}

TEST(TensorCommands, EvaluateRanksFormatsOnDumpedKv) {
  // Two layers of K/V with an outlier channel in the keys, as real models have.
  std::map<std::string, Tensor> dump;
  for (int layer = 0; layer < 2; ++layer) {
    std::vector<float> k = random_values(48 * 2 * 64, 10 + layer),
                       v = random_values(48 * 2 * 64, 20 + layer);
    for (std::size_t i = 0; i < k.size(); i += 64) k[i + 7] *= 30.0f;
    dump["layers." + std::to_string(layer) + ".k"] = Tensor::of_floats({48, 2, 64}, k);
    dump["layers." + std::to_string(layer) + ".v"] = Tensor::of_floats({48, 2, 64}, v);
  }
  const fs::path file = scratch() / "dump.safetensors";
  write_safetensors(file, dump);
  const auto [code, text] = kvcache("evaluate --kv " + file.string() +
                                    " --formats fp16,int8-per-token,int4-group --json");
  ASSERT_EQ(code, 0) << text;
  const auto j = nlohmann::json::parse(text.substr(text.find('{')));
  EXPECT_EQ(j["pairs"], 2);
  const auto& ranking = j["ranking"];
  ASSERT_EQ(ranking.size(), 3u);
  EXPECT_EQ(ranking[0]["format"], "fp16");  // best first
  EXPECT_EQ(ranking[2]["format"], "int4-group");
  EXPECT_LT(ranking[0]["attention_mean_error"].get<double>(), 1e-3);
  EXPECT_GT(ranking[2]["k_mean_error"].get<double>(), ranking[1]["k_mean_error"].get<double>());

  write_npy(scratch() / "kv.npy", {2, 16, 1, 32}, random_values(2 * 16 * 32, 30));
  auto [npy_code, npy_text] =
      kvcache("evaluate --kv " + (scratch() / "kv.npy").string() + " --formats bf16");
  EXPECT_EQ(npy_code, 0) << npy_text;
  EXPECT_THAT(npy_text, ::testing::HasSubstr("bf16"));
  write_safetensors(scratch() / "nopair.safetensors",
                    {{"keys_only", Tensor::of_floats({4, 1, 8}, random_values(32, 1))}});
  std::tie(npy_code, npy_text) =
      kvcache("evaluate --kv " + (scratch() / "nopair.safetensors").string());
  EXPECT_NE(npy_code, 0);
  EXPECT_THAT(npy_text, ::testing::HasSubstr("no K/V pair found among [keys_only]"));
}

TEST(TensorCommands, BadInputsNameWhatWasExpected) {
  write_npy(scratch() / "f64.npy", {2, 4}, std::vector<float>(16, 1.0f), "<f8");
  write_npy(scratch() / "flat.npy", {8}, std::vector<float>(8, 1.0f));
  auto [code, text] = kvcache("quantize --format fp16 --in " +
                              (scratch() / "missing.npy").string() + " --out /tmp/x.safetensors");
  EXPECT_NE(code, 0);
  EXPECT_THAT(text, ::testing::HasSubstr("missing.npy"));
  std::tie(code, text) = kvcache("quantize --format fp16 --in " + (scratch() / "f64.npy").string() +
                                 " --out /tmp/x.safetensors");
  EXPECT_NE(code, 0);
  EXPECT_THAT(text, ::testing::HasSubstr("dtype '<f8' is not supported"));
  std::tie(code, text) = kvcache("attention --q " + (scratch() / "flat.npy").string() + " --k " +
                                 (scratch() / "flat.npy").string() + " --v " +
                                 (scratch() / "flat.npy").string() + " --out /tmp/x.safetensors");
  EXPECT_NE(code, 0);
  EXPECT_THAT(text, ::testing::HasSubstr("expected Q [q_heads, q_len, head_dim]"));
}

}  // namespace
}  // namespace kvcache::tool
