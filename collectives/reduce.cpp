#include "collectives/reduce.hpp"

#include "compressors/element_io.hpp"

namespace gw::coll {

void reduce_sum(void* dst, const void* src, size_t n, DType dtype) {
  detail::with_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    auto* d = static_cast<typename T::Storage*>(dst);
    const auto* s = static_cast<const typename T::Storage*>(src);
    for (size_t i = 0; i < n; ++i) d[i] = T::store(T::load(d[i]) + T::load(s[i]));
  });
}

void divide(void* dst, size_t n, DType dtype, float divisor) {
  detail::with_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    auto* d = static_cast<typename T::Storage*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = T::store(T::load(d[i]) / divisor);
  });
}

}  // namespace gw::coll
