#include "kernels/portable/portable_path.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/avx512/vectors.hpp"
#include "kernels/block_attention.hpp"

namespace kvcache::cpu {
namespace {

using namespace avx512;

KVCACHE_KERNELS_BEGIN

// out[i] = op(x[i], ...) for n floats of each input, 16 at a time and a masked tail (out may be
// one of the inputs).
template <class Op, class... Inputs>
KVCACHE_AVX512 KVCACHE_INLINE void map_avx512_n(float* out, std::uint32_t n, Op op,
                                                const Inputs*... x) {
  std::uint32_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, op(_mm512_loadu_ps(x + i)...));
  if (i < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(out + i, tail, op(_mm512_maskz_loadu_ps(tail, x + i)...));
  }
}
// The operations mapped (functors: a lambda's operator() would not get the AVX-512 target).
struct Exp2 {
  KVCACHE_AVX512 KVCACHE_INLINE __m512 operator()(__m512 v) const { return exp2_avx512(v); }
};
struct Times {
  __m512 factor;
  KVCACHE_AVX512 KVCACHE_INLINE __m512 operator()(__m512 v) const {
    return _mm512_mul_ps(v, factor);
  }
};
struct Mix {  // a x mine + b x theirs
  __m512 mine, theirs;
  KVCACHE_AVX512 KVCACHE_INLINE __m512 operator()(__m512 a, __m512 b) const {
    return _mm512_fmadd_ps(b, theirs, _mm512_mul_ps(a, mine));
  }
};
KVCACHE_AVX512 void exp2_avx512_n(float* x, std::uint32_t n) {
  map_avx512_n(x, n, Exp2{}, x);
}
KVCACHE_AVX512 void scale_avx512_n(const float* x, float factor, float* out, std::uint32_t n) {
  map_avx512_n(out, n, Times{_mm512_set1_ps(factor)}, x);
}
// x = x * mine + other * theirs for n floats (other does not overlap x).
KVCACHE_AVX512 void mix_avx512_n(float* x, float mine, const float* other, float theirs,
                                 std::uint32_t n) {
  map_avx512_n(x, n, Mix{_mm512_set1_ps(mine), _mm512_set1_ps(theirs)}, x, other);
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

KVCACHE_KERNELS_END

}  // namespace

void exp2_in_place(float* x, std::uint32_t n) {
  if (has_avx512()) {
    exp2_avx512_n(x, n);
    return;
  }
  for (std::uint32_t i = 0; i < n; ++i) x[i] = std::exp2(x[i]);
}

void scale_into(const float* x, float factor, float* out, std::uint32_t n) {
  if (has_avx512()) {
    scale_avx512_n(x, factor, out, n);
    return;
  }
  for (std::uint32_t i = 0; i < n; ++i) out[i] = x[i] * factor;
}

void block_logits(const float* q, std::uint32_t group, std::uint32_t dim, const float* k,
                  std::uint32_t n, float* logits) {
  if (has_avx512() && dim % 16 == 0) {
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

void mix_into(float* x, float mine, const float* other, float theirs, std::uint32_t n) {
  if (has_avx512()) {
    mix_avx512_n(x, mine, other, theirs, n);
    return;
  }
  for (std::uint32_t i = 0; i < n; ++i) x[i] = x[i] * mine + other[i] * theirs;
}

void block_accumulate(const float* weights, std::uint32_t group, std::uint32_t dim, const float* v,
                      std::uint32_t n, float* acc) {
  if (has_avx512() && dim % 16 == 0) {
    accumulate_avx512(weights, group, dim, v, n, acc);
    return;
  }
  for (std::uint32_t g = 0; g < group; ++g)
    for (std::uint32_t j = 0; j < n; ++j)
      for (std::uint32_t i = 0; i < dim; ++i)
        acc[std::size_t{g} * dim + i] +=
            weights[std::size_t{g} * n + j] * v[std::size_t{j} * dim + i];
}

// Rows decoded to float32, or a shape without passes: logits, the state's update and the values'
// accumulation in float arithmetic, vectorized where the CPU allows.
void BlockAttention::portable(const float* q, const RowBlock& k, const RowBlock& v, std::uint32_t n,
                              SoftmaxState& state, float* logits) const {
  const std::uint32_t group = group_, dim = dim_;
  const auto* kf = static_cast<const float*>(k.rows);
  const auto* vf = static_cast<const float*>(v.rows);
  block_logits(q, group, dim, kf, n, logits);
  for (std::uint32_t g = 0; g < group; ++g) {
    float* lg = logits + std::size_t{g} * n;
    const float block_max = *std::max_element(lg, lg + n);
    const float m = std::max(state.m[g], block_max);
    if (m != state.m[g]) state.rescale(g, std::exp2(state.m[g] - m), dim);  // 0 at first
    for (std::uint32_t j = 0; j < n; ++j) lg[j] -= m;
    exp2_in_place(lg, n);
    for (std::uint32_t j = 0; j < n; ++j) state.l[std::size_t{g} * kLanes + j % kLanes] += lg[j];
    state.m[g] = m;
  }
  block_accumulate(logits, group, dim, vf, n, state.acc.data());
}

}  // namespace kvcache::cpu
