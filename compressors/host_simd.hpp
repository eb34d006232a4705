// Instruction-set dispatch for the host codecs' hot loops. A hot loop is written once as
// plain C++ (always_inline) and built three times: for the x86-64 baseline (SSE2), and
// with __attribute__((target)) for AVX2+FMA and for AVX-512; host_simd() picks one at run
// time. The float semantics are the same in every build: compressors are compiled with
// -ffp-contract=off, so a wider instruction set never fuses an add into a multiply, and
// the only FMAs are the ones the shared math asks for (hd::fma).
#pragma once

#include <cstdlib>
#include <cstring>

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__) && \
    !defined(GW_NO_HOST_SIMD)
#define GW_HOST_X86_SIMD 1
#include <immintrin.h>
#define GW_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define GW_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma")))
#endif

// What a per-instruction-set build calls must be inlined into it to be built for that set.
#if defined(__GNUC__) || defined(__clang__)
#define GW_INLINE_HOT inline __attribute__((always_inline))
#else
#define GW_INLINE_HOT inline
#endif

namespace gw {

// The instruction-set level of the host codecs' hot loops: the best the CPU and OS support,
// capped by the environment variable GW_HOST_SIMD (baseline, avx2 or avx512), which exists
// so that tests and benchmarks can run every build on one machine. Off x86-64: baseline.
// Every level writes the same message bytes.
enum class HostSimd : int { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

inline HostSimd detect_host_simd() {
  HostSimd level = HostSimd::kBaseline;
#if defined(GW_HOST_X86_SIMD)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) level = HostSimd::kAvx2;
  if (level == HostSimd::kAvx2 && __builtin_cpu_supports("avx512f")) level = HostSimd::kAvx512;
#endif
  if (const char* cap = std::getenv("GW_HOST_SIMD")) {
    HostSimd want = level;
    if (std::strcmp(cap, "baseline") == 0 || std::strcmp(cap, "sse2") == 0) want = HostSimd::kBaseline;
    if (std::strcmp(cap, "avx2") == 0) want = HostSimd::kAvx2;
    if (static_cast<int>(want) < static_cast<int>(level)) level = want;
  }
  return level;
}

inline HostSimd host_simd() {
  static const HostSimd level = detect_host_simd();
  return level;
}

}  // namespace gw
