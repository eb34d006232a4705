// Element-wise reduction and scaling on host memory for the dense collectives.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gradwire/codec.hpp"

namespace gw::coll {

// dst[i] += src[i] for n elements of dtype (half types accumulate through float).
void reduce_sum(void* dst, const void* src, size_t n, DType dtype);
// dst[i] /= divisor.
void divide(void* dst, size_t n, DType dtype, float divisor);

}  // namespace gw::coll
