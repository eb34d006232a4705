// Marks the per-element math that host codecs and CUDA kernels share, and pins its float
// rounding: on the device every add and multiply is an explicitly rounded op, so nvcc
// cannot fuse them into an FMA the host does not do. The host side is built with
// -ffp-contract=off for the same reason.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define GW_HD __host__ __device__ __forceinline__
#else
#define GW_HD inline
#endif

// The CPU kernel emulator (tools/kernel_emulator) compiles the kernels as host code with
// GW_KERNEL_EMULATOR set: its stand-ins for the rounded-op intrinsics can then mimic the GPU
// (the canonical NaN), so that host/device differences show without a GPU.
#if defined(__CUDA_ARCH__) || defined(GW_KERNEL_EMULATOR)
#define GW_HD_ROUNDED_OPS 1
#else
#define GW_HD_ROUNDED_OPS 0
#endif

namespace gw::hd {

GW_HD float add(float a, float b) {
#if GW_HD_ROUNDED_OPS
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

GW_HD float sub(float a, float b) {
#if GW_HD_ROUNDED_OPS
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

GW_HD float mul(float a, float b) {
#if GW_HD_ROUNDED_OPS
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

GW_HD float div(float a, float b) {
#if GW_HD_ROUNDED_OPS
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

GW_HD float fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

GW_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);
  return u;
#endif
}

GW_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
#endif
}

constexpr uint32_t kInfinityKey = 0x7f800000u;
constexpr uint32_t kNanKey = 0x7fc00000u;

// Magnitude key: orders |x| for non-negative floats as unsigned integers. Every NaN gets one
// key (above infinity's), whatever its payload: with error feedback the host's add keeps an
// input NaN's payload while the device's makes the canonical NaN, and keys that told NaNs
// apart would let the two pick different indices at the k boundary. Tied NaNs go to the
// lower index on both.
GW_HD uint32_t magnitude_key(float x) {
  const uint32_t m = float_bits(x) & 0x7fffffffu;
  return m > kInfinityKey ? kNanKey : m;
}

GW_HD uint64_t mulhi64(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(a, b);
#else
  __extension__ using u128 = unsigned __int128;
  return static_cast<uint64_t>((static_cast<u128>(a) * b) >> 64);
#endif
}

}  // namespace gw::hd
