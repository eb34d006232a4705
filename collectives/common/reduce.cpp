#include "collectives/common/reduce.hpp"

#include <type_traits>

#include "compressors/element_io.hpp"

namespace gw::coll {
namespace {

// Storage and arithmetic of each dtype: Compute is what an element is loaded into.
template <class S, class C>
struct Native {
  using Storage = S;
  using Compute = C;
  static C load(S v) { return static_cast<C>(v); }
  static S store(C v) { return static_cast<S>(v); }
};
template <class T>
struct Through {  // fp16, bf16: through float
  using Storage = typename T::Storage;
  using Compute = float;
  static float load(Storage v) { return T::load(v); }
  static Storage store(float v) { return T::store(v); }
};

template <class Fn>
void with_collective_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: return fn(Native<float, float>{});
    case DType::kFloat16: return fn(Through<detail::F16>{});
    case DType::kBFloat16: return fn(Through<detail::BF16>{});
    case DType::kFloat64: return fn(Native<double, double>{});
    case DType::kInt8: return fn(Native<int8_t, int8_t>{});
    case DType::kUInt8: return fn(Native<uint8_t, uint8_t>{});
    case DType::kInt32: return fn(Native<int32_t, int32_t>{});
    case DType::kInt64: return fn(Native<int64_t, int64_t>{});
  }
}

// Wrapping integer arithmetic: in an unsigned type at least as wide as unsigned int, so that
// neither signed overflow nor the promotion of narrow types to int can be undefined.
template <class C>
using Wide = std::conditional_t<(sizeof(C) < sizeof(unsigned)), unsigned, std::make_unsigned_t<C>>;

template <class C>
C add(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    return a + b;
  } else {
    return static_cast<C>(static_cast<Wide<C>>(static_cast<Wide<C>>(a) + static_cast<Wide<C>>(b)));
  }
}
template <class C>
C mul(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    return a * b;
  } else {
    return static_cast<C>(static_cast<Wide<C>>(static_cast<Wide<C>>(a) * static_cast<Wide<C>>(b)));
  }
}
// b replaces a when it is smaller, or NaN (a NaN a stays): NaN on either side gives NaN.
template <class C>
C min_of(C a, C b) {
  if constexpr (std::is_floating_point_v<C>)
    return (b < a || b != b) ? b : a;
  else
    return b < a ? b : a;
}
template <class C>
C max_of(C a, C b) {
  if constexpr (std::is_floating_point_v<C>)
    return (b > a || b != b) ? b : a;
  else
    return b > a ? b : a;
}

// A plain loop the compiler vectorises (for float32 sum: d[i] = d[i] + s[i]).
template <class T, class F>
void combine(void* dst, const void* src, size_t n, F f) {
  auto* d = static_cast<typename T::Storage*>(dst);
  const auto* s = static_cast<const typename T::Storage*>(src);
  for (size_t i = 0; i < n; ++i) d[i] = T::store(f(T::load(d[i]), T::load(s[i])));
}

}  // namespace

void reduce_into(void* dst, const void* src, size_t n, DType dtype, ReduceOp op) {
  with_collective_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    using C = typename T::Compute;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: return combine<T>(dst, src, n, [](C a, C b) { return add(a, b); });
      case ReduceOp::kProd: return combine<T>(dst, src, n, [](C a, C b) { return mul(a, b); });
      case ReduceOp::kMin: return combine<T>(dst, src, n, [](C a, C b) { return min_of(a, b); });
      case ReduceOp::kMax: return combine<T>(dst, src, n, [](C a, C b) { return max_of(a, b); });
    }
  });
}

void reduce_sum(void* dst, const void* src, size_t n, DType dtype) { reduce_into(dst, src, n, dtype, ReduceOp::kSum); }

void divide(void* dst, size_t n, DType dtype, int divisor) {
  with_collective_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    using C = typename T::Compute;
    auto* d = static_cast<typename T::Storage*>(dst);
    if constexpr (std::is_floating_point_v<C>) {
      const C q = static_cast<C>(divisor);
      for (size_t i = 0; i < n; ++i) d[i] = T::store(T::load(d[i]) / q);
    } else {
      // In int64 (int8..int32 fit; int64 itself divides exactly): C++ division truncates.
      for (size_t i = 0; i < n; ++i) d[i] = T::store(static_cast<C>(static_cast<int64_t>(T::load(d[i])) / divisor));
    }
  });
}

void widen_to_float(float* dst, const void* src, uint64_t n, DType dtype, bool add) {
  detail::with_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    const auto* s = static_cast<const typename T::Storage*>(src);
    if (add) {
      for (uint64_t i = 0; i < n; ++i) dst[i] += T::load(s[i]);
    } else {
      for (uint64_t i = 0; i < n; ++i) dst[i] = T::load(s[i]);
    }
  });
}

void narrow_from_float(void* dst, const float* src, uint64_t n, DType dtype, int divisor) {
  detail::with_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    auto* d = static_cast<typename T::Storage*>(dst);
    if (divisor == 1) {
      for (uint64_t i = 0; i < n; ++i) d[i] = T::store(src[i]);
    } else {
      const auto q = static_cast<float>(divisor);
      for (uint64_t i = 0; i < n; ++i) d[i] = T::store(src[i] / q);
    }
  });
}

}  // namespace gw::coll
