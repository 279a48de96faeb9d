// Which vector kernels the CPU backend may use, decided once per process from what the CPU has
// and three variables (so that every family can be tested on one machine):
//   KVCACHE_CPU_ISA=avx512|avx2|portable  the widest family allowed (never wider than the CPU's)
//   KVCACHE_CPU_NO_VNNI=1                 no integer dot-product instructions
//   KVCACHE_CPU_NO_VBMI=1                 no AVX-512 byte permutes (int8 and int4 values then
//                                         decoded to float, as on CPUs without them)
#pragma once

namespace kvcache::cpu {

enum class VectorIsa { portable, avx2, avx512 };

// avx512: AVX-512 F, DQ, BW and VL with F16C and FMA; avx2: AVX2 with F16C and FMA.
VectorIsa vector_isa();
inline bool has_avx512() {
  return vector_isa() == VectorIsa::avx512;
}

// Whether vector_isa()'s width has integer dot products: AVX512_VNNI for avx512, AVX-VNNI for
// avx2.
bool has_vnni();

// Whether the avx512 family may permute bytes (AVX512_VBMI: every AVX-512 CPU with VNNI but
// Cascade and Cooper Lake), which its int8 and int4 value passes need.
bool has_vbmi();

// Whether the AVX-512 int8 key pass asks for a block's rows into L1 before it transposes them:
// on Intel CPUs (faster on Sapphire Rapids), not on AMD's (faster without on Zen 4; figures:
// docs/perf-log.md). A choice of speed alone.
bool prefetch_rows_into_l1();

// The kernels in use, as a user reads them: "avx512-vnni", "avx512", "avx2-vnni", "avx2" or
// "portable".
const char* kernel_family();

}  // namespace kvcache::cpu
