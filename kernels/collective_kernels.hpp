// Element-wise kernels of the device collectives (collectives/device_*.cpp): the sums and
// scalings that the host algorithms do in loops, with the same float operations, so both
// paths give the same bits. Each only enqueues work on stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gradwire/status.hpp"

namespace gw::kern {

Status launch_add(float* acc, const float* x, uint64_t n, cudaStream_t stream);  // acc += x
// owner += sum / divisor (divisor 1: owner += sum), then sum = 0.
Status launch_fold_owner(float* owner, float* sum, uint64_t n, int divisor, cudaStream_t stream);
Status launch_divide(float* x, uint64_t n, int divisor, cudaStream_t stream);  // x /= divisor

}  // namespace gw::kern
