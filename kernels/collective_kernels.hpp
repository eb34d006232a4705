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
// One thread that polls word (mapped pinned host memory, its device address) until
// (int32)(*word - value) >= 0: where the driver has no stream memory operations
// (cuStreamWaitValue32), a stream waits for a host-side signal this way.
Status launch_wait_word(const volatile uint32_t* word, uint32_t value, cudaStream_t stream);

}  // namespace gw::kern
