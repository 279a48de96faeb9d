#include "kernels/cpu_features.hpp"

#include <cpuid.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace kvcache::cpu {
namespace {

// Features that not every compiler's __builtin_cpu_supports knows (clang 14 has neither), read
// from CPUID: F16C is leaf 1 ECX bit 29, AVX-VNNI leaf 7 subleaf 1 EAX bit 4.
bool has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
}
bool has_avx_vnni() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 4)) != 0;
}

VectorIsa widest_supported() {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl");
  return avx512 ? VectorIsa::avx512 : avx2 ? VectorIsa::avx2 : VectorIsa::portable;
}

bool set(const char* variable) {
  const char* value = std::getenv(variable);
  return value != nullptr && *value != '\0' && std::string_view(value) != "0";
}

}  // namespace

VectorIsa vector_isa() {
  static const VectorIsa isa = [] {
    const VectorIsa widest = widest_supported();
    const char* cap = std::getenv("KVCACHE_CPU_ISA");
    if (cap == nullptr || *cap == '\0') return widest;
    const std::string_view name(cap);
    VectorIsa allowed = widest;
    if (name == "portable") {
      allowed = VectorIsa::portable;
    } else if (name == "avx2") {
      allowed = VectorIsa::avx2;
    } else if (name != "avx512") {
      // A plugin has no logger of the host's; stderr is where a user running it looks.
      std::fprintf(stderr,
                   "kvcache cpu-tbb: KVCACHE_CPU_ISA=%s ignored (expected avx512, avx2 or "
                   "portable)\n",
                   cap);
    }
    return allowed < widest ? allowed : widest;
  }();
  return isa;
}

bool has_vnni() {
  static const bool yes = [] {
    if (set("KVCACHE_CPU_NO_VNNI")) return false;
    switch (vector_isa()) {
      case VectorIsa::avx512:
        return __builtin_cpu_supports("avx512vnni") != 0;
      case VectorIsa::avx2:
        return has_avx_vnni();
      case VectorIsa::portable:
        return false;
    }
    return false;
  }();
  return yes;
}

bool has_vbmi() {
  static const bool yes =
      has_avx512() && __builtin_cpu_supports("avx512vbmi") != 0 && !set("KVCACHE_CPU_NO_VBMI");
  return yes;
}

bool prefetch_rows_into_l1() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("amd") == 0;
  }();
  return yes;
}

const char* kernel_family() {
  switch (vector_isa()) {
    case VectorIsa::avx512:
      return has_vnni() ? "avx512-vnni" : "avx512";
    case VectorIsa::avx2:
      return has_vnni() ? "avx2-vnni" : "avx2";
    case VectorIsa::portable:
      return "portable";
  }
  return "portable";
}

}  // namespace kvcache::cpu
