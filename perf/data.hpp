// Inputs the perf tools send and the references they check against. Every value is a pure
// function of (rank, index), so any rank can compute any other rank's input.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "compressors/half.hpp"
#include "gradwire/gradwire.h"

namespace gw::perf {

inline size_t elem_size(gw_dtype_t t) { return t == GW_FLOAT32 ? 4 : 2; }

inline const char* dtype_label(gw_dtype_t t) {
  return t == GW_FLOAT16 ? "half" : t == GW_BFLOAT16 ? "bfloat16" : "float";
}

// Small integers: their sum over ranks is exact in every type, whatever the order, so
// lossless paths are checked bit for bit (#wrong).
inline float int_value(size_t i, int rank) {
  return static_cast<float>(static_cast<int>((i * 7 + static_cast<size_t>(rank) * 13) % 41) - 20);
}

// A gradient-like value: roughly normal, scale 1e-3, with a tenth of the elements ten times
// larger (so top-k has something to find). What is timed and what relerr is measured on.
// step > 0 gives other, independent values of the same distribution (the running-sum error's
// per-step noise); step 0 is the timed input.
inline float grad_value(size_t i, int rank, uint64_t step = 0) {
  uint64_t z = (static_cast<uint64_t>(rank) << 40) ^ i ^ (step * 0xD1B54A32D192ED03ull);
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  // Four 16-bit uniforms summed: mean 2, variance 1/3.
  double u = 0;
  for (int k = 0; k < 4; ++k) u += static_cast<double>((z >> (16 * k)) & 0xffff) / 65536.0;
  const double normal = (u - 2.0) * 1.7320508075688772;
  const double scale = (z % 10 == 0) ? 1e-2 : 1e-3;
  return static_cast<float>(normal * scale);
}

inline void store(void* buf, size_t i, float v, gw_dtype_t t) {
  if (t == GW_FLOAT32)
    static_cast<float*>(buf)[i] = v;
  else
    static_cast<uint16_t*>(buf)[i] = t == GW_FLOAT16 ? gw::hd::float_to_half(v) : gw::hd::float_to_bf16(v);
}

inline double load(const void* buf, size_t i, gw_dtype_t t) {
  if (t == GW_FLOAT32) return static_cast<const float*>(buf)[i];
  const uint16_t h = static_cast<const uint16_t*>(buf)[i];
  return t == GW_FLOAT16 ? gw::hd::half_to_float(h) : gw::hd::bf16_to_float(h);
}

// What a rank would send in type t: the value after rounding to t.
inline double as_sent(float v, gw_dtype_t t) {
  if (t == GW_FLOAT32) return v;
  return t == GW_FLOAT16 ? gw::hd::half_to_float(gw::hd::float_to_half(v))
                         : gw::hd::bf16_to_float(gw::hd::float_to_bf16(v));
}

}  // namespace gw::perf
