#include "softmax_block.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

namespace kvcache::cpu {
namespace {

#define KVCACHE_AVX512 __attribute__((target("avx512f,avx512dq")))

// GCC 12's AVX-512 headers warn about their own placeholders (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// 2^x: x = n + f with f in [-1/2, 1/2], 2^f by a degree-6 polynomial (relative error < 2e-7),
// then scaled by 2^n with vscalefps.
KVCACHE_AVX512 __m512 exp2_avx512(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-126.0f));
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(1.5403530393381606e-4f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076284772e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108664821580e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650695910071e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718055994531e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

KVCACHE_AVX512 void exp2_avx512_n(float* x, std::uint32_t n) {
  std::uint32_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, exp2_avx512(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(x + i, tail, exp2_avx512(_mm512_maskz_loadu_ps(tail, x + i)));
  }
}

KVCACHE_AVX512 void logits_avx512(const float* q, std::uint32_t group, std::uint32_t dim,
                                  const float* k, std::uint32_t n, float* logits) {
  for (std::uint32_t j = 0; j < n; ++j) {
    const float* kj = k + std::size_t{j} * dim;
    for (std::uint32_t g = 0; g < group; ++g) {
      const float* qg = q + std::size_t{g} * dim;
      __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
      std::uint32_t i = 0;
      for (; i + 32 <= dim; i += 32) {
        a = _mm512_fmadd_ps(_mm512_loadu_ps(qg + i), _mm512_loadu_ps(kj + i), a);
        b = _mm512_fmadd_ps(_mm512_loadu_ps(qg + i + 16), _mm512_loadu_ps(kj + i + 16), b);
      }
      if (i < dim) a = _mm512_fmadd_ps(_mm512_loadu_ps(qg + i), _mm512_loadu_ps(kj + i), a);
      logits[std::size_t{g} * n + j] = _mm512_reduce_add_ps(_mm512_add_ps(a, b));
    }
  }
}

KVCACHE_AVX512 void accumulate_avx512(const float* weights, std::uint32_t group, std::uint32_t dim,
                                      const float* v, std::uint32_t n, float* acc) {
  for (std::uint32_t g = 0; g < group; ++g) {
    float* ag = acc + std::size_t{g} * dim;
    for (std::uint32_t i = 0; i < dim; i += 16) {
      __m512 a = _mm512_loadu_ps(ag + i);
      for (std::uint32_t j = 0; j < n; ++j)
        a = _mm512_fmadd_ps(_mm512_set1_ps(weights[std::size_t{g} * n + j]),
                            _mm512_loadu_ps(v + std::size_t{j} * dim + i), a);
      _mm512_storeu_ps(ag + i, a);
    }
  }
}

#pragma GCC diagnostic pop

bool avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  return yes;
}

}  // namespace

void exp2_in_place(float* x, std::uint32_t n) {
  if (avx512()) {
    exp2_avx512_n(x, n);
    return;
  }
  for (std::uint32_t i = 0; i < n; ++i) x[i] = std::exp2(x[i]);
}

void block_logits(const float* q, std::uint32_t group, std::uint32_t dim, const float* k,
                  std::uint32_t n, float* logits) {
  if (avx512() && dim % 16 == 0) {
    logits_avx512(q, group, dim, k, n, logits);
    return;
  }
  for (std::uint32_t j = 0; j < n; ++j)
    for (std::uint32_t g = 0; g < group; ++g) {
      float dot = 0.0f;
      for (std::uint32_t i = 0; i < dim; ++i) dot += q[g * dim + i] * k[std::size_t{j} * dim + i];
      logits[std::size_t{g} * n + j] = dot;
    }
}

void attend_block(const float* q, std::uint32_t group, std::uint32_t dim, const float* k,
                  const float* v, std::uint32_t n, SoftmaxState& state, float* logits) {
  block_logits(q, group, dim, k, n, logits);
  for (std::uint32_t g = 0; g < group; ++g) {
    float* lg = logits + std::size_t{g} * n;
    const float block_max = *std::max_element(lg, lg + n);
    const float m = std::max(state.m[g], block_max);
    const float correction = std::exp2(state.m[g] - m);  // 0 for the first block
    for (std::uint32_t j = 0; j < n; ++j) lg[j] -= m;
    exp2_in_place(lg, n);
    float sum = 0.0f;
    for (std::uint32_t j = 0; j < n; ++j) sum += lg[j];
    state.l[g] = state.l[g] * correction + sum;
    state.m[g] = m;
    if (correction != 1.0f)
      for (std::uint32_t i = 0; i < dim; ++i) state.acc[std::size_t{g} * dim + i] *= correction;
  }
  if (avx512() && dim % 16 == 0) {
    accumulate_avx512(logits, group, dim, v, n, state.acc.data());
    return;
  }
  for (std::uint32_t g = 0; g < group; ++g)
    for (std::uint32_t j = 0; j < n; ++j)
      for (std::uint32_t i = 0; i < dim; ++i)
        state.acc[std::size_t{g} * dim + i] += logits[std::size_t{g} * n + j] * v[std::size_t{j} * dim + i];
}

void SoftmaxState::merge(const SoftmaxState& other, std::uint32_t dim) {
  for (std::size_t g = 0; g < m.size(); ++g) {
    if (other.l[g] == 0.0f) continue;
    const float top = std::max(m[g], other.m[g]);
    const float mine = l[g] == 0.0f ? 0.0f : std::exp2(m[g] - top);
    const float theirs = std::exp2(other.m[g] - top);
    for (std::uint32_t i = 0; i < dim; ++i)
      acc[g * dim + i] = acc[g * dim + i] * mine + other.acc[g * dim + i] * theirs;
    l[g] = l[g] * mine + other.l[g] * theirs;
    m[g] = top;
  }
}

}  // namespace kvcache::cpu
