#include "memory_bandwidth.hpp"

#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "parallel_timing.hpp"

namespace kvcache::bench {
namespace {

// GCC 12's AVX-512 headers warn about their own placeholders (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// XOR rather than add: the value only keeps the loads alive, and cannot overflow. Each thread
// reads four streams at once (its share in four parts, side by side), which keeps more of the
// hardware prefetchers busy than one stream does.
__attribute__((target("avx512f"))) std::uint64_t sum_avx512(const std::byte* p, std::size_t n) {
  const std::size_t part = n / 4 / 64 * 64;
  __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
  for (std::size_t i = 0; i + 64 <= part; i += 64) {
    a = _mm512_xor_si512(a, _mm512_load_si512(p + i));
    b = _mm512_xor_si512(b, _mm512_load_si512(p + part + i));
    c = _mm512_xor_si512(c, _mm512_load_si512(p + 2 * part + i));
    d = _mm512_xor_si512(d, _mm512_load_si512(p + 3 * part + i));
  }
  return static_cast<std::uint64_t>(
      _mm512_reduce_or_epi64(_mm512_xor_si512(_mm512_xor_si512(a, b), _mm512_xor_si512(c, d))));
}
#pragma GCC diagnostic pop

__attribute__((target("avx2"))) std::uint64_t sum_avx2(const std::byte* p, std::size_t n) {
  const std::size_t part = n / 4 / 64 * 64;
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (std::size_t i = 0; i + 64 <= part; i += 64) {
    for (const std::size_t at : {i, i + 32}) {
      a = _mm256_xor_si256(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + at)));
      b = _mm256_xor_si256(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + part + at)));
      c = _mm256_xor_si256(c,
                           _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 2 * part + at)));
      d = _mm256_xor_si256(d,
                           _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 3 * part + at)));
    }
  }
  const __m256i x = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
  return static_cast<std::uint64_t>(_mm256_extract_epi64(x, 0) ^ _mm256_extract_epi64(x, 3));
}

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
  const auto sum = __builtin_cpu_supports("avx512f") ? &sum_avx512
                   : __builtin_cpu_supports("avx2")  ? &sum_avx2
                                                     : &sum_portable;
  std::vector<std::uint64_t> sums(threads);  // kept so the reads are not optimized away
  const std::size_t share = bytes / threads / 256 * 256;
  const double seconds = fastest_parallel_run(
      threads, repeats, [&](int t) { sums[t] = sum(buffer.get() + t * share, share); });
  benchmark_sink ^= sums[0];
  return static_cast<double>(share * threads) / seconds / 1e9;
}

}  // namespace kvcache::bench
