// Decoding topk and dgc messages on the device (compressors/sparse_layout.hpp, apply_sparse)
// and the index checks of validate_sparse. A thread per (index, value) pair: the indices of
// a validated message are strictly increasing, so no two threads touch one element and no
// atomics are needed. Enqueues only.
#include <algorithm>
#include <cstdint>
#include <string>

#include "compressors/hd.hpp"
#include "compressors/sparse_layout.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_codecs.hpp"

namespace gw::kern {
namespace {

constexpr int kThreads = 256;
constexpr uint64_t kMaxBlocks = 16384;

unsigned int blocks_for(uint64_t items) {
  return static_cast<unsigned int>(std::clamp<uint64_t>((items + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

// Payload words at any alignment: the message may sit anywhere in a caller's buffer.
__device__ __forceinline__ uint32_t load_u32(const uint8_t* p) {
  if ((reinterpret_cast<uintptr_t>(p) & 3) == 0) return *reinterpret_cast<const uint32_t*>(p);
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

template <class Idx>
__device__ __forceinline__ uint64_t load_index(const uint8_t* payload, uint64_t i) {
  if constexpr (sizeof(Idx) == 4) {
    return load_u32(payload + 4 * i);
  } else {
    const uint8_t* p = payload + 8 * i;
    if ((reinterpret_cast<uintptr_t>(p) & 7) == 0) return *reinterpret_cast<const uint64_t*>(p);
    return static_cast<uint64_t>(load_u32(p)) | static_cast<uint64_t>(load_u32(p + 4)) << 32;
  }
}

template <class Idx>
__global__ void __launch_bounds__(kThreads)
    scatter_kernel(const uint8_t* payload, uint64_t k, float* dst, DecodeMode mode) {
  const uint8_t* values = payload + k * sizeof(Idx);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t j = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < k; j += stride) {
    const uint64_t i = load_index<Idx>(payload, j);
    const float v = __uint_as_float(load_u32(values + 4 * j));
    switch (mode) {
      case DecodeMode::kOverwrite: dst[i] = v; break;
      case DecodeMode::kAccumulate: dst[i] = hd::add(dst[i], v); break;
      case DecodeMode::kSubtract: dst[i] = hd::sub(dst[i], v); break;
    }
  }
}

template <class Idx>
__global__ void __launch_bounds__(kThreads)
    check_kernel(const uint8_t* payload, uint64_t k, uint64_t count, uint32_t* bad) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t j = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < k; j += stride) {
    const uint64_t i = load_index<Idx>(payload, j);
    if (i >= count || (j > 0 && i <= load_index<Idx>(payload, j - 1))) *bad = 1;
  }
}

template <class Fn>
auto with_width(uint64_t count, Fn&& fn) {
  if (detail::index_bytes(count) == 4) return fn(uint32_t{});
  return fn(uint64_t{});
}

}  // namespace

Status decode_sparse(const DecodeJob& job) {
  const wire::Header& h = *job.header;
  if (job.dtype != DType::kFloat32) {
    return unsupported(std::string(codec_name(h.codec)) + " messages decode into float32 only, not " +
                       dtype_name(job.dtype));
  }
  auto* dst = static_cast<float*>(job.dst);
  if (job.mode == DecodeMode::kOverwrite && h.count > 0) {
    GW_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dst, 0, h.count * sizeof(float), job.stream));
  }
  if (h.k == 0) return Status::ok();
  return with_width(h.count, [&](auto idx) {
    using Idx = decltype(idx);
    scatter_kernel<Idx><<<blocks_for(h.k), kThreads, 0, job.stream>>>(job.payload, h.k, dst, job.mode);
    return launch_status("sparse scatter_kernel");
  });
}

Status check_sparse_indices(const wire::Header& header, const uint8_t* payload, uint32_t* bad,
                            cudaStream_t stream) {
  if (header.k == 0) return Status::ok();
  return with_width(header.count, [&](auto idx) {
    using Idx = decltype(idx);
    check_kernel<Idx><<<blocks_for(header.k), kThreads, 0, stream>>>(payload, header.k, header.count, bad);
    return launch_status("sparse check_kernel");
  });
}

}  // namespace gw::kern
