// Element-wise reduction and scaling on host memory for the dense collectives.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gradwire/codec.hpp"
#include "gradwire/communicator.hpp"

namespace gw::coll {

// dst[i] = dst[i] op src[i] for n elements of dtype; kAvg reduces as kSum (divide at the end).
// Integer sums and products wrap around; half types compute through float, float64 in
// double; min and max of floating types give NaN when either side is NaN.
void reduce_into(void* dst, const void* src, size_t n, DType dtype, ReduceOp op);
// dst[i] += src[i]: reduce_into with kSum.
void reduce_sum(void* dst, const void* src, size_t n, DType dtype);
// dst[i] /= divisor (divisor > 0); integers round toward zero.
void divide(void* dst, size_t n, DType dtype, int divisor);
// The compressed collectives' float32 side of float32, float16 or bfloat16 data:
// dst = src widened (add: dst += src widened), and dst = src / divisor rounded to nearest in
// dtype (the device divides alike).
void widen_to_float(float* dst, const void* src, uint64_t n, DType dtype, bool add);
void narrow_from_float(void* dst, const float* src, uint64_t n, DType dtype, int divisor = 1);

}  // namespace gw::coll
