// Decoding topk and dgc messages on the device (compressors/sparse_layout.hpp, apply_sparse)
// and the index checks of validate_sparse, also for messages nobody has checked yet (the
// decode then applies only when the device's own checks passed). A thread per (index,
// value) pair: the indices of a validated message are strictly increasing, so no two
// threads touch one element and no atomics are needed. Enqueues only.
#include <algorithm>
#include <cstdint>
#include <string>

#include "common/cuda_check.hpp"
#include "compressors/hd.hpp"
#include "compressors/sparse_layout.hpp"
#include "kernels/device_codecs.hpp"
#include "kernels/grid_size.cuh"
#include "kernels/precise_math.cuh"

namespace gw::kern {
namespace {

constexpr int kThreads = 256;

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

// True when a gated kernel must leave everything alone: no verdict (the host validated the
// message) lets it run.
__device__ __forceinline__ bool refused(const SparseVerdict* v) {
  return v != nullptr && (v->header_bad != 0 || v->index_bad != 0);
}

template <class Idx>
__global__ void __launch_bounds__(kThreads)
    scatter_kernel(const uint8_t* payload, uint64_t k, float* dst, DecodeMode mode, const SparseVerdict* gate) {
  if (refused(gate)) return;
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
    check_kernel(const uint8_t* payload, uint64_t k, uint64_t count, uint32_t* bad, const SparseVerdict* gate) {
  if (gate != nullptr && gate->header_bad != 0) return;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t j = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < k; j += stride) {
    const uint64_t i = load_index<Idx>(payload, j);
    if (i >= count || (j > 0 && i <= load_index<Idx>(payload, j - 1))) *bad = 1;
  }
}

__global__ void __launch_bounds__(kThreads) zero_kernel(float* dst, uint64_t n, const SparseVerdict* gate) {
  if (refused(gate)) return;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = 0.0f;
}

__device__ __forceinline__ uint64_t header_u64(const uint8_t* h, unsigned at) {
  uint64_t x = 0;
  for (int b = 7; b >= 0; --b) x = x << 8 | h[at + b];
  return x;
}

__device__ __forceinline__ uint32_t header_u32(const uint8_t* h, unsigned at) {
  return static_cast<uint32_t>(h[at]) | static_cast<uint32_t>(h[at + 1]) << 8 | static_cast<uint32_t>(h[at + 2]) << 16 |
         static_cast<uint32_t>(h[at + 3]) << 24;
}

static_assert(wire::kMagic[0] == 'G' && wire::kMagic[1] == 'W' && wire::kMagic[2] == 'R' && wire::kMagic[3] == 'E',
              "the gate kernel checks the magic by its letters");
constexpr uint8_t kWireVersion = wire::kVersion;
constexpr uint8_t kTopkId = static_cast<uint8_t>(CodecId::kTopk);
constexpr uint8_t kDgcId = static_cast<uint8_t>(CodecId::kDgc);
constexpr uint8_t kFloat32Id = static_cast<uint8_t>(DType::kFloat32);

// Copies the header into the verdict and checks it as a sparse message of n elements, k of
// them sent, in len bytes: every field read_header and validate_sparse_fields check, with
// count == n (the destination's size) and k the one len implies. One block of 64 threads.
__global__ void gate_kernel(const uint8_t* msg, uint64_t len, uint64_t n, uint64_t k, SparseVerdict* v) {
  const unsigned i = threadIdx.x;
  if (i < wire::kHeaderBytes) v->header[i] = msg[i];
  __syncthreads();
  if (i != 0) return;
  const uint8_t* h = v->header;
  const bool ok = h[0] == 'G' && h[1] == 'W' && h[2] == 'R' && h[3] == 'E' && h[4] == kWireVersion &&
                  (h[5] == kTopkId || h[5] == kDgcId) && h[6] == kFloat32Id && h[7] == 0 && header_u64(h, 8) == n &&
                  header_u32(h, 16) == 0 && header_u32(h, 20) == 0 && header_u64(h, wire::kKAt) == k &&
                  header_u64(h, 32) == 0 && header_u64(h, 40) == 0 &&
                  header_u64(h, wire::kPayloadBytesAt) == len - wire::kHeaderBytes && k <= n;
  v->header_bad = ok ? 0 : 1;
  v->index_bad = 0;
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
    GW_ASSIGN_OR_RETURN(const unsigned int blocks, grid_for(scatter_kernel<Idx>, kThreads, h.k, kThreads));
    scatter_kernel<Idx><<<blocks, kThreads, 0, job.stream>>>(job.payload, h.k, dst, job.mode, nullptr);
    return launch_status("sparse scatter_kernel");
  });
}

Status check_sparse_indices(const wire::Header& header, const uint8_t* payload, uint32_t* bad, cudaStream_t stream) {
  if (header.k == 0) return Status::ok();
  return with_width(header.count, [&](auto idx) {
    using Idx = decltype(idx);
    GW_ASSIGN_OR_RETURN(const unsigned int blocks, grid_for(check_kernel<Idx>, kThreads, header.k, kThreads));
    check_kernel<Idx><<<blocks, kThreads, 0, stream>>>(payload, header.k, header.count, bad, nullptr);
    return launch_status("sparse check_kernel");
  });
}

Status decode_sparse_untrusted(const uint8_t* msg, size_t len, float* dst, uint64_t n, DecodeMode mode,
                               SparseVerdict* verdict, cudaStream_t stream) {
  const uint64_t entry = detail::index_bytes(n) + 4;
  const uint64_t body = len >= wire::kHeaderBytes ? len - wire::kHeaderBytes : 0;
  // A k that no message of len bytes can carry fails the gate without a launch sized by it.
  const uint64_t k = len >= wire::kHeaderBytes && body % entry == 0 && body / entry <= n ? body / entry : ~uint64_t{0};
  gate_kernel<<<1, 64, 0, stream>>>(msg, len, n, k, verdict);
  GW_RETURN_IF_ERROR(launch_status("sparse gate_kernel"));
  if (k == ~uint64_t{0}) return Status::ok();
  const uint8_t* payload = msg + wire::kHeaderBytes;
  return with_width(n, [&](auto idx) -> Status {
    using Idx = decltype(idx);
    if (k > 0) {
      GW_ASSIGN_OR_RETURN(const unsigned int blocks, grid_for(check_kernel<Idx>, kThreads, k, kThreads));
      check_kernel<Idx><<<blocks, kThreads, 0, stream>>>(payload, k, n, &verdict->index_bad, verdict);
      GW_RETURN_IF_ERROR(launch_status("sparse check_kernel"));
    }
    if (mode == DecodeMode::kOverwrite && n > 0) {
      GW_ASSIGN_OR_RETURN(const unsigned int blocks, grid_for(zero_kernel, kThreads, n, kThreads));
      zero_kernel<<<blocks, kThreads, 0, stream>>>(dst, n, verdict);
      GW_RETURN_IF_ERROR(launch_status("sparse zero_kernel"));
    }
    if (k == 0) return Status::ok();
    GW_ASSIGN_OR_RETURN(const unsigned int blocks, grid_for(scatter_kernel<Idx>, kThreads, k, kThreads));
    scatter_kernel<Idx><<<blocks, kThreads, 0, stream>>>(payload, k, dst, mode, verdict);
    return launch_status("sparse scatter_kernel");
  });
}

}  // namespace gw::kern
