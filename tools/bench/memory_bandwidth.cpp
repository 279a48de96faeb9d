#include "memory_bandwidth.hpp"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

namespace kvcache::bench {
namespace {

// GCC 12's AVX-512 headers warn about their own placeholders (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// XOR rather than add: the value only keeps the loads alive, and cannot overflow.
__attribute__((target("avx512f"))) std::uint64_t sum_avx512(const std::byte* p, std::size_t n) {
  __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
  for (std::size_t i = 0; i + 256 <= n; i += 256) {
    a = _mm512_xor_si512(a, _mm512_load_si512(p + i));
    b = _mm512_xor_si512(b, _mm512_load_si512(p + i + 64));
    c = _mm512_xor_si512(c, _mm512_load_si512(p + i + 128));
    d = _mm512_xor_si512(d, _mm512_load_si512(p + i + 192));
  }
  return static_cast<std::uint64_t>(
      _mm512_reduce_or_epi64(_mm512_xor_si512(_mm512_xor_si512(a, b), _mm512_xor_si512(c, d))));
}
#pragma GCC diagnostic pop

std::uint64_t sum_portable(const std::byte* p, std::size_t n) {
  std::uint64_t s[4] = {0, 0, 0, 0};
  for (std::size_t i = 0; i + 32 <= n; i += 32) {
    for (int j = 0; j < 4; ++j) {
      std::uint64_t v;
      std::memcpy(&v, p + i + 8 * j, 8);
      s[j] += v;
    }
  }
  return s[0] + s[1] + s[2] + s[3];
}

}  // namespace

std::uint64_t benchmark_sink = 0;

double read_bandwidth_gbps(std::size_t bytes, int threads, int repeats) {
  bytes = bytes / 256 * 256;
  std::unique_ptr<std::byte, void (*)(void*)> buffer(
      static_cast<std::byte*>(std::aligned_alloc(64, bytes)), &std::free);
  std::memset(buffer.get(), 1, bytes);  // fault every page in before timing
  const bool avx512 = __builtin_cpu_supports("avx512f");
  std::vector<double> samples;
  std::vector<std::uint64_t> sums(threads);  // kept so the reads are not optimized away
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    const std::size_t share = bytes / threads / 256 * 256;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const std::byte* p = buffer.get() + t * share;
        sums[t] = avx512 ? sum_avx512(p, share) : sum_portable(p, share);
      });
    }
    for (auto& th : pool) th.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    samples.push_back(static_cast<double>(share * threads) / seconds / 1e9);
    benchmark_sink = sums[0];
  }
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  return samples[samples.size() / 2];
}

}  // namespace kvcache::bench
