// cpu-tbb's batch_invariant option (docs/backends/cpu-tbb.md): a query's output is the same bits
// whether it is a row of a prefill, decoded alone, decoded in a batch beside another sequence, or
// computed on one thread, in every format whose codes a token owns alone (those that group tokens
// share scales between them: their codes depend on the tokens written with them).
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvcache/cache.hpp"
#include "kvcache/config.hpp"
#include "kvcache/registry.hpp"
#include "kvcache/tensor.hpp"

namespace kvcache {
namespace {

constexpr std::uint32_t kQ = 12, kKv = 4, kDim = 64;  // groups of 3, padded to 4 in the kernels
constexpr std::uint32_t kTokens = 1100;  // two of the invariant schedule's chunks of 1,024 slots

std::unique_ptr<Cache> open(const std::string& format, const std::string& backend_options = "") {
  static const auto registry = Registry::load(PluginSettings{});
  return Cache::open(parse_config("model: {layers: 1, q_heads: 12, kv_heads: 4, head_dim: 64}\n"
                                  "backend: [{name: cpu-tbb, batch_invariant: true" +
                                      backend_options +
                                      "}]\n"
                                      "cache: {page_size: 16, capacity: 64MiB}\n"
                                      "format: " +
                                      format + "\n",
                                  "batch_invariance_test.yaml", {}),
                     registry);
}

// Row i of `heads` x kDim floats, the same for the same (seed, i) in every cache.
std::vector<float> rows(std::uint32_t seed, std::uint32_t first, std::uint32_t n,
                        std::uint32_t heads) {
  std::vector<float> out;
  for (std::uint32_t i = first; i < first + n; ++i) {
    std::mt19937 rng(seed * 100003 + i);
    std::normal_distribution<float> normal;
    for (std::uint32_t e = 0; e < heads * kDim; ++e) out.push_back(normal(rng));
  }
  return out;
}

// Appends tokens [first, first + n) of the stream `seed` to `id`, without attention.
void append(Cache& cache, SeqId id, std::uint32_t seed, std::uint32_t first, std::uint32_t n) {
  if (n == 0) return;
  Step step = cache.begin_step(id, n);
  const auto k = rows(seed, first, n, kKv), v = rows(seed + 1, first, n, kKv);
  const auto rows_n = static_cast<std::int64_t>(n);
  step.append(0, Tensor::host(k.data(), {rows_n, kKv, kDim}),
              Tensor::host(v.data(), {rows_n, kKv, kDim}));
  (void)step.finish();
}

// Decodes token p of stream `seed` in `id` (which holds tokens [0, p)), beside token `other_p` of
// stream 7 in `other` when given: the first query's output.
std::vector<float> decode(Cache& cache, SeqId id, std::uint32_t p,
                          std::optional<SeqId> other = std::nullopt, std::uint32_t other_p = 0) {
  std::vector<SeqId> ids{id};
  if (other) ids.push_back(*other);
  Step step = cache.begin_step(ids, std::vector<std::uint32_t>(ids.size(), 1));
  std::vector<float> k = rows(1, p, 1, kKv), v = rows(2, p, 1, kKv), q = rows(3, p, 1, kQ);
  if (other) {
    const auto ok = rows(7, other_p, 1, kKv), ov = rows(8, other_p, 1, kKv),
               oq = rows(9, other_p, 1, kQ);
    k.insert(k.end(), ok.begin(), ok.end());
    v.insert(v.end(), ov.begin(), ov.end());
    q.insert(q.end(), oq.begin(), oq.end());
  }
  const auto n = static_cast<std::int64_t>(ids.size());
  std::vector<float> out(q.size());
  step.append(0, Tensor::host(k.data(), {n, kKv, kDim}), Tensor::host(v.data(), {n, kKv, kDim}));
  step.decode(0, Tensor::host(q.data(), {n, kQ, kDim}), Tensor::host(out.data(), {n, kQ, kDim}));
  (void)step.finish();
  out.resize(std::size_t{kQ} * kDim);
  return out;
}

class BatchInvariance : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchInvariance, AQueryGivesTheSameBitsAloneInABatchAndAsARowOfAPrefill) {
  // The prefill: every token at once, each query seeing the tokens up to its own.
  const auto prefilled = open(GetParam());
  const SeqId s = prefilled->add_sequence();
  std::vector<float> rows_out(std::size_t{kTokens} * kQ * kDim);
  {
    Step step = prefilled->begin_step(s, kTokens);
    const auto k = rows(1, 0, kTokens, kKv), v = rows(2, 0, kTokens, kKv),
               q = rows(3, 0, kTokens, kQ);
    step.append(0, Tensor::host(k.data(), {kTokens, kKv, kDim}),
                Tensor::host(v.data(), {kTokens, kKv, kDim}));
    step.prefill(0, Tensor::host(q.data(), {kTokens, kQ, kDim}),
                 Tensor::host(rows_out.data(), {kTokens, kQ, kDim}));
    (void)step.finish();
  }
  const auto row = [&](std::uint32_t p) {
    const auto at = rows_out.begin() + std::ptrdiff_t{p} * kQ * kDim;
    return std::vector<float>(at, at + kQ * kDim);
  };

  // Decoded: alone, beside another sequence, and on one thread; at positions around pages and
  // the schedule's chunks.
  const auto alone = open(GetParam()), batched = open(GetParam()),
             one_thread = open(GetParam(), ", threads: 1");
  const SeqId a = alone->add_sequence(), b = batched->add_sequence(), o = batched->add_sequence(),
              t = one_thread->add_sequence();
  append(*batched, o, 7, 0, 300);
  std::uint32_t held = 0;
  for (const std::uint32_t p : {0u, 15u, 16u, 17u, 1023u, 1024u, 1099u}) {
    for (const auto& [cache, id] :
         {std::pair{alone.get(), a}, std::pair{batched.get(), b}, std::pair{one_thread.get(), t}})
      append(*cache, id, 1, held, p - held);  // K of stream 1, V of stream 2, as decode()'s
    held = p + 1;
    EXPECT_EQ(decode(*alone, a, p), row(p)) << "decoded alone, token " << p;
    EXPECT_EQ(decode(*batched, b, p, o, 300 + p), row(p)) << "decoded in a batch, token " << p;
    EXPECT_EQ(decode(*one_thread, t, p), row(p)) << "decoded on one thread, token " << p;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, BatchInvariance,
                         ::testing::Values("fp32", "fp16", "bf16", "fp8-e4m3", "int8-per-token",
                                           "int4-group"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace kvcache
