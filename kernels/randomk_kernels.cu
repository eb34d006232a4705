// randomk on the device (compressors/randomk_codec.cpp): value j of the message is the
// accumulated input at stratified_index(j) of the shared stream (seed, step, all ranks), a
// thread per value; the indices are never sent. Enqueues only.
#include <cstdint>
#include <string>

#include "common/cuda_check.hpp"
#include "compressors/hd.hpp"
#include "compressors/stratified.hpp"
#include "kernels/device_codecs.hpp"
#include "kernels/grid_size.cuh"
#include "kernels/precise_math.cuh"

namespace gw::kern {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;

// residual[i] = residual[i] + src[i] everywhere: the residual must hold the accumulated value
// at every index the message does not carry.
__global__ void __launch_bounds__(kThreads) accumulate_kernel(float* residual, const float* src, uint64_t n) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
    float r[kUnroll], s[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      r[u] = residual[i + u * stride];
      s[u] = src[i + u * stride];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) residual[i + u * stride] = hd::add(r[u], s[u]);
  }
  for (; i < n; i += stride) residual[i] = hd::add(residual[i], src[i]);
}

// out[j] = x[stratified_index(j)]; with a residual, the sent value is subtracted from it.
__global__ void __launch_bounds__(kThreads)
    gather_kernel(const float* x, uint64_t n, uint64_t k, RandomStream rs, float* out, float* residual) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t j = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < k; j += stride) {
    const uint64_t i = stratified_index(rs, j, n, k);
    const float v = x[i];
    out[j] = v;
    if (residual != nullptr) residual[i] = hd::sub(v, v);
  }
}

// Payload floats may sit at any alignment in a caller's buffer.
__device__ __forceinline__ float load_f32(const uint8_t* p) {
  if ((reinterpret_cast<uintptr_t>(p) & 3) == 0) return *reinterpret_cast<const float*>(p);
  const uint32_t u = static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                     static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
  return __uint_as_float(u);
}

__global__ void __launch_bounds__(kThreads)
    scatter_kernel(const uint8_t* payload, uint64_t n, uint64_t k, RandomStream rs, float* dst, DecodeMode mode) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t j = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < k; j += stride) {
    const uint64_t i = stratified_index(rs, j, n, k);
    const float v = load_f32(payload + j * sizeof(float));
    switch (mode) {
      case DecodeMode::kOverwrite: dst[i] = v; break;
      case DecodeMode::kAccumulate: dst[i] = hd::add(dst[i], v); break;
      case DecodeMode::kSubtract: dst[i] = hd::sub(dst[i], v); break;
    }
  }
}

}  // namespace

Result<uint64_t> encode_randomk(const EncodeJob& job, wire::Header& header) {
  if (job.dtype != DType::kFloat32) {
    return unsupported(std::string("randomk does not take ") + dtype_name(job.dtype) + " input");
  }
  const uint64_t n = job.n;
  const uint64_t k = job.spec->k_for(n);
  header.k = k;
  header.seed = job.spec->seed;
  header.step = job.ctx.step;
  const auto* src = static_cast<const float*>(job.src);
  if (src != nullptr && job.residual != nullptr) {
    GW_ASSIGN_OR_RETURN(const unsigned grid,
                        grid_for(accumulate_kernel, kThreads, (n + kUnroll - 1) / kUnroll, kThreads));
    accumulate_kernel<<<grid, kThreads, 0, job.stream>>>(job.residual, src, n);
    GW_RETURN_IF_ERROR(launch_status("accumulate_kernel"));
  }
  const float* x = job.residual != nullptr ? job.residual : src;
  const RandomStream rs{header.seed, header.step, kSharedStreamRank};
  GW_ASSIGN_OR_RETURN(const unsigned grid, grid_for(gather_kernel, kThreads, k, kThreads));
  gather_kernel<<<grid, kThreads, 0, job.stream>>>(x, n, k, rs, reinterpret_cast<float*>(job.payload), job.residual);
  GW_RETURN_IF_ERROR(launch_status("gather_kernel"));
  return k * sizeof(float);
}

Status decode_randomk(const DecodeJob& job) {
  const wire::Header& h = *job.header;
  if (job.dtype != DType::kFloat32) {
    return unsupported(std::string("randomk messages decode into float32 only, not ") + dtype_name(job.dtype));
  }
  auto* dst = static_cast<float*>(job.dst);
  if (job.mode == DecodeMode::kOverwrite && h.count > 0) {
    GW_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dst, 0, h.count * sizeof(float), job.stream));
  }
  if (h.k == 0) return Status::ok();
  const RandomStream rs{h.seed, h.step, kSharedStreamRank};
  GW_ASSIGN_OR_RETURN(const unsigned grid, grid_for(scatter_kernel, kThreads, h.k, kThreads));
  scatter_kernel<<<grid, kThreads, 0, job.stream>>>(job.payload, h.count, h.k, rs, dst, job.mode);
  return launch_status("scatter_kernel");
}

namespace {
Result<uint64_t> encode_randomk_row(const EncodeJob& job, wire::Header& header, const uint64_t**) {
  return encode_randomk(job, header);
}
}  // namespace

GW_REGISTER_DEVICE_CODEC(CodecId::kRandomk, encode_randomk_row, decode_randomk);

}  // namespace gw::kern
