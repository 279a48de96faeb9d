#include "fma_peak.hpp"

#include <immintrin.h>

#include <vector>

#include "memory_bandwidth.hpp"
#include "parallel_timing.hpp"

namespace kvcache::bench {
namespace {

// Twelve chains, more than an FMA's latency times the units that issue them, so that the units
// never wait; each step multiplies by just under 1 and adds a little, so nothing overflows.
constexpr int kChains = 12;
constexpr long kSteps = 2'000'000;

// GCC 12's AVX-512 headers warn about their own placeholders (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) float chains_avx512() {
  __m512 a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm512_set1_ps(1.0f + 1e-3f * static_cast<float>(i));
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
  for (long n = 0; n < kSteps; ++n)
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) a[i] = _mm512_fmadd_ps(a[i], x, y);
  for (int i = 1; i < kChains; ++i) a[0] = _mm512_add_ps(a[0], a[i]);
  return _mm512_reduce_add_ps(a[0]);
}
#pragma GCC diagnostic pop

__attribute__((target("avx2,fma"))) float chains_avx2() {
  __m256 a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm256_set1_ps(1.0f + 1e-3f * static_cast<float>(i));
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
  for (long n = 0; n < kSteps; ++n)
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) a[i] = _mm256_fmadd_ps(a[i], x, y);
  for (int i = 1; i < kChains; ++i) a[0] = _mm256_add_ps(a[0], a[i]);
  return _mm256_cvtss_f32(a[0]);
}

}  // namespace

double fma_peak_gflops(int threads, int repeats) {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (!avx512 && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) return 0.0;
  std::vector<float> sums(threads);  // kept, so that the chains are not optimized away
  const double seconds = fastest_parallel_run(
      threads, repeats, [&](int t) { sums[t] = avx512 ? chains_avx512() : chains_avx2(); });
  benchmark_sink ^= static_cast<unsigned>(sums[0]);
  const double lanes = avx512 ? 16.0 : 8.0;
  return 2.0 * lanes * kChains * kSteps * threads / seconds / 1e9;
}

}  // namespace kvcache::bench
