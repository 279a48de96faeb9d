#include "softmax_block.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kvcache/status.hpp"

namespace kvcache::cpu {
namespace {

#define KVCACHE_AVX512 __attribute__((target("avx512f,avx512dq")))

// GCC 12's AVX-512 headers warn about their own placeholders (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// 2^x: x = n + f with f in [-1/2, 1/2], 2^f by a degree-6 polynomial (relative error < 2e-7),
// then scaled by 2^n with vscalefps.
KVCACHE_AVX512 inline __attribute__((always_inline)) __m512 exp2_avx512(__m512 x) {
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

// Sums each of 16 vectors across its lanes: out lane i holds the sum of s[kSumOrder[i]].
// A shuffle network (about 3 instructions per vector) instead of 16 horizontal reductions.
KVCACHE_AVX512 inline __attribute__((always_inline)) __m512 sum_lanes16(__m512 s[16]) {
  __m512 a[8], b[4], c[2];
  for (int i = 0; i < 8; ++i)
    a[i] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0xEE));
  for (int i = 0; i < 4; ++i)
    b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xDD));
  for (int i = 0; i < 2; ++i)
    c[i] = _mm512_add_ps(_mm512_unpacklo_ps(b[2 * i], b[2 * i + 1]),
                         _mm512_unpackhi_ps(b[2 * i], b[2 * i + 1]));
  return _mm512_add_ps(
      _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(c[0]), _mm512_castps_pd(c[1]))),
      _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(c[0]), _mm512_castps_pd(c[1]))));
}

// Which input each output lane of sum_lanes16 holds, and the inverse, found by running the
// network once.
struct SumOrder {
  alignas(64) std::int32_t slot_of_lane[16];
  alignas(64) std::int32_t lane_of_slot[16];
  KVCACHE_AVX512 SumOrder() {
    __m512 s[16];
    for (int j = 0; j < 16; ++j) s[j] = _mm512_set1_ps(static_cast<float>(j));
    alignas(64) float out[16];
    _mm512_store_ps(out, sum_lanes16(s));
    for (int i = 0; i < 16; ++i) {
      slot_of_lane[i] = static_cast<std::int32_t>(out[i] / 16.0f);
      lane_of_slot[slot_of_lane[i]] = i;
    }
  }
};

KVCACHE_AVX512 inline __attribute__((always_inline)) float exp2_scalar(float x) {
  return _mm512_cvtss_f32(exp2_avx512(_mm512_set1_ps(x)));
}

// A block of up to 16 keys for G query heads of dimension D, everything in registers: logits by
// 16 accumulators per head and one shuffle-reduction, a base-2 softmax update on one vector,
// then values accumulated over parts of D so that all accumulators stay in registers. Values
// are float32 rows, or (HalfValues) the stored fp16 rows read in place.
template <int G, int D, bool HalfValues>
KVCACHE_AVX512 void attend16(const float* q, const float* k, const void* v, std::uint32_t n,
                             float* m, float* l, float* acc) {
  static const SumOrder order;
  constexpr int C = D / 16;                   // vectors per row
  constexpr int H = C < 16 / G ? C : 16 / G;  // vectors per pass over the values
  const __m512i slot = _mm512_load_si512(order.slot_of_lane);
  const __m512i lane = _mm512_load_si512(order.lane_of_slot);
  alignas(64) float weight[G][16];
  for (int g = 0; g < G; ++g) {
    __m512 s[16];
    for (int j = 0; j < 16; ++j) s[j] = _mm512_setzero_ps();
    // All 16 rows (missing ones are zeros, see attend_block): fixed trip counts unroll fully.
    for (int c = 0; c < C; ++c) {
      const __m512 qc = _mm512_loadu_ps(q + g * D + 16 * c);
      for (int j = 0; j < 16; ++j)
        s[j] = _mm512_fmadd_ps(qc, _mm512_loadu_ps(k + j * D + 16 * c), s[j]);
    }
    // Lane i is slot slot_of_lane[i]; lanes of missing slots get -inf.
    const __mmask16 present = _mm512_cmplt_epi32_mask(slot, _mm512_set1_epi32(static_cast<int>(n)));
    const __m512 logits = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), present, sum_lanes16(s));
    const float block_top = _mm512_reduce_max_ps(logits);
    // Only a new maximum rescales what was accumulated so far.
    if (block_top > m[g]) {
      if (m[g] != -INFINITY) {
        const float correction = exp2_scalar(m[g] - block_top);
        l[g] *= correction;
        for (int c = 0; c < C; ++c)
          _mm512_storeu_ps(
              acc + g * D + 16 * c,
              _mm512_mul_ps(_mm512_loadu_ps(acc + g * D + 16 * c), _mm512_set1_ps(correction)));
      }
      m[g] = block_top;
    }
    const __m512 p =
        _mm512_maskz_mov_ps(present, exp2_avx512(_mm512_sub_ps(logits, _mm512_set1_ps(m[g]))));
    l[g] += _mm512_reduce_add_ps(p);
    _mm512_store_ps(weight[g], _mm512_permutexvar_ps(lane, p));  // back into slot order
  }
  for (int pass = 0; pass < C; pass += H) {
    __m512 a[G][H];
    for (int g = 0; g < G; ++g)
      for (int h = 0; h < H; ++h) a[g][h] = _mm512_loadu_ps(acc + g * D + 16 * (pass + h));
    // Stored rows past n may be padding: only the first n are read.
    for (std::uint32_t j = 0; j < n; ++j) {
      __m512 vj[H];
      for (int h = 0; h < H; ++h) {
        if constexpr (HalfValues) {
          const auto* row = static_cast<const std::uint16_t*>(v) + j * D + 16 * (pass + h);
          vj[h] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row)));
        } else {
          vj[h] = _mm512_loadu_ps(static_cast<const float*>(v) + j * D + 16 * (pass + h));
        }
      }
      for (int g = 0; g < G; ++g) {
        const __m512 w = _mm512_set1_ps(weight[g][j]);
        for (int h = 0; h < H; ++h) a[g][h] = _mm512_fmadd_ps(w, vj[h], a[g][h]);
      }
    }
    for (int g = 0; g < G; ++g)
      for (int h = 0; h < H; ++h) _mm512_storeu_ps(acc + g * D + 16 * (pass + h), a[g][h]);
  }
}

using Attend16 = void (*)(const float*, const float*, const void*, std::uint32_t, float*, float*,
                          float*);

Attend16 specialized(std::uint32_t group, std::uint32_t dim, Values values) {
#define KVCACHE_CASE(G, D)    \
  if (group == G && dim == D) \
    return values == Values::float16 ? &attend16<G, D, true> : &attend16<G, D, false>;
  KVCACHE_CASE(1, 64)
  KVCACHE_CASE(2, 64) KVCACHE_CASE(4, 64) KVCACHE_CASE(8, 64) KVCACHE_CASE(1, 128)
      KVCACHE_CASE(2, 128) KVCACHE_CASE(4, 128) KVCACHE_CASE(8, 128)
#undef KVCACHE_CASE
          return nullptr;
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

bool takes_fp16_values(std::uint32_t group, std::uint32_t dim) {
  return avx512() && specialized(group, dim, Values::float16) != nullptr;
}

void attend_block(const float* q, std::uint32_t group, std::uint32_t dim, float* k, const void* v,
                  Values values, std::uint32_t n, SoftmaxState& state, float* logits) {
  if (avx512()) {
    if (const Attend16 fast = specialized(group, dim, values)) {
      // The kernel reads 16 key rows; those past n must be finite (their weight is 0): zeros.
      std::fill(k + std::size_t{n} * dim, k + std::size_t{(n + 15) / 16 * 16} * dim, 0.0f);
      const std::size_t value_bytes = values == Values::float16 ? 2 : 4;
      for (std::uint32_t j = 0; j < n; j += 16)
        fast(q, k + std::size_t{j} * dim,
             static_cast<const std::byte*>(v) + std::size_t{j} * dim * value_bytes,
             std::min(16u, n - j), state.m.data(), state.l.data(), state.acc.data());
      return;
    }
  }
  if (values != Values::float32)
    throw Error(Code::internal, "attend_block: float16 values need the AVX-512 kernel");
  const auto* vf = static_cast<const float*>(v);
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
    accumulate_avx512(logits, group, dim, vf, n, state.acc.data());
    return;
  }
  for (std::uint32_t g = 0; g < group; ++g)
    for (std::uint32_t j = 0; j < n; ++j)
      for (std::uint32_t i = 0; i < dim; ++i)
        state.acc[std::size_t{g} * dim + i] +=
            logits[std::size_t{g} * n + j] * vf[std::size_t{j} * dim + i];
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
