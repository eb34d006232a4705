// IEEE single-precision adds and divides, rounded to nearest, never fused: the same bits as
// the host loops in collectives/ (built with -ffp-contract=off).
#include "common/cuda_check.hpp"
#include "kernels/collective_kernels.hpp"
#include "kernels/grid_size.cuh"
#include "kernels/precise_math.cuh"

namespace gw::kern {
namespace {

constexpr int kBlock = 256;

__global__ void add_kernel(float* acc, const float* x, uint64_t n) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    acc[i] = __fadd_rn(acc[i], x[i]);
  }
}

__global__ void fold_owner_kernel(float* owner, float* sum, uint64_t n, int divisor) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const float d = static_cast<float>(divisor);
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float s = sum[i];
    owner[i] = __fadd_rn(owner[i], divisor == 1 ? s : __fdiv_rn(s, d));
    sum[i] = 0.0f;
  }
}

__global__ void divide_kernel(float* x, uint64_t n, int divisor) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const float d = static_cast<float>(divisor);
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    x[i] = __fdiv_rn(x[i], d);
  }
}

__global__ void wait_word_kernel(const volatile uint32_t* word, uint32_t value) {
  while (static_cast<int32_t>(*word - value) < 0) __nanosleep(1000);
}

}  // namespace

Status launch_wait_word(const volatile uint32_t* word, uint32_t value, cudaStream_t stream) {
  wait_word_kernel<<<1, 1, 0, stream>>>(word, value);
  return launch_status("wait_word_kernel");
}

Status launch_add(float* acc, const float* x, uint64_t n, cudaStream_t stream) {
  if (n == 0) return Status::ok();
  GW_ASSIGN_OR_RETURN(const unsigned grid, grid_for(add_kernel, kBlock, n, kBlock));
  add_kernel<<<grid, kBlock, 0, stream>>>(acc, x, n);
  return launch_status("add_kernel");
}

Status launch_fold_owner(float* owner, float* sum, uint64_t n, int divisor, cudaStream_t stream) {
  if (n == 0) return Status::ok();
  GW_ASSIGN_OR_RETURN(const unsigned grid, grid_for(fold_owner_kernel, kBlock, n, kBlock));
  fold_owner_kernel<<<grid, kBlock, 0, stream>>>(owner, sum, n, divisor);
  return launch_status("fold_owner_kernel");
}

Status launch_divide(float* x, uint64_t n, int divisor, cudaStream_t stream) {
  if (n == 0) return Status::ok();
  GW_ASSIGN_OR_RETURN(const unsigned grid, grid_for(divide_kernel, kBlock, n, kBlock));
  divide_kernel<<<grid, kBlock, 0, stream>>>(x, n, divisor);
  return launch_status("divide_kernel");
}

}  // namespace gw::kern
