// Typed element access for the dtypes gradwire moves, and the loops that write decoded
// values into a destination in overwrite, accumulate or subtract mode.
#pragma once

#include <cstddef>
#include <cstdint>

#include "compressors/half.hpp"
#include "gradwire/codec.hpp"

namespace gw::detail {

struct F32 {
  using Storage = float;
  static float load(float v) { return v; }
  static float store(float v) { return v; }
};
struct F16 {
  using Storage = uint16_t;
  static float load(uint16_t v) { return hd::half_to_float(v); }
  static uint16_t store(float v) { return hd::float_to_half(v); }
};
struct BF16 {
  using Storage = uint16_t;
  static float load(uint16_t v) { return hd::bf16_to_float(v); }
  static uint16_t store(float v) { return hd::float_to_bf16(v); }
};

// Calls fn(F32{}), fn(F16{}) or fn(BF16{}) for the dtype.
template <class Fn>
decltype(auto) with_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat16: return fn(F16{});
    case DType::kBFloat16: return fn(BF16{});
    default: break;  // float32; callers check the dtype is one codecs take
  }
  return fn(F32{});
}

template <class T>
inline void apply_one(typename T::Storage& d, float v, DecodeMode mode) {
  switch (mode) {
    case DecodeMode::kOverwrite: d = T::store(v); break;
    case DecodeMode::kAccumulate: d = T::store(T::load(d) + v); break;
    case DecodeMode::kSubtract: d = T::store(T::load(d) - v); break;
  }
}

// dst[i] (op)= value(i) for i in [0, n).
template <class T, class ValueFn>
void apply_dense(typename T::Storage* dst, uint64_t n, DecodeMode mode, ValueFn value) {
  switch (mode) {
    case DecodeMode::kOverwrite:
      for (uint64_t i = 0; i < n; ++i) dst[i] = T::store(value(i));
      break;
    case DecodeMode::kAccumulate:
      for (uint64_t i = 0; i < n; ++i) dst[i] = T::store(T::load(dst[i]) + value(i));
      break;
    case DecodeMode::kSubtract:
      for (uint64_t i = 0; i < n; ++i) dst[i] = T::store(T::load(dst[i]) - value(i));
      break;
  }
}

// Error feedback's residual += g, element by element (the sum every encode of it must see).
inline void add_into(float* acc, const float* add, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) acc[i] += add[i];
}

}  // namespace gw::detail
