// none, fp16 and bf16 on the device: element for element what compressors/dense_codec.cpp
// writes. One thread per 4 elements (grid-stride), with the widest loads and stores each
// pointer's alignment allows; plain copies go to cudaMemcpyAsync.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "compressors/dense_layout.hpp"
#include "kernels/device_apply.cuh"
#include "kernels/device_codecs.hpp"

namespace gw::kern {
namespace {

uint32_t quad_bytes(DType dtype) { return 4 * static_cast<uint32_t>(dtype_size(dtype)); }

__device__ __forceinline__ uint64_t thread_index() {
  return static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ uint64_t thread_count() { return static_cast<uint64_t>(gridDim.x) * blockDim.x; }

// Encode without error feedback: src (kIn) rounded to the payload type (kOut).
template <DType kIn, DType kOut>
__global__ void __launch_bounds__(kThreads)
    convert_kernel(const uint8_t* src, uint32_t src_width, uint8_t* out, uint32_t out_width, uint64_t n) {
  const uint64_t quads = n / 4;
  for (uint64_t q = thread_index(); q < quads; q += thread_count()) {
    float v[4];
    load_quad<kIn>(src, q, src_width, v);
    store_quad<kOut>(out, q, out_width, v);
  }
  for (uint64_t i = 4 * quads + thread_index(); i < n; i += thread_count()) {
    store_elem<kOut>(out, i, out_width, load_elem<kIn>(src, i, src_width));
  }
}

// Encode with error feedback (float32 input): the payload gets acc rounded to kOut, the
// residual acc minus that value read back (acc - acc for none).
template <DType kOut>
__global__ void __launch_bounds__(kThreads)
    feedback_kernel(const AccSource in, uint8_t* out, uint32_t out_width, uint64_t n) {
  using E = Elem<kOut>;
  const uint64_t quads = n / 4;
  constexpr uint32_t kAll = 0xfu;
  for (uint64_t q = thread_index(); q < quads; q += thread_count()) {
    float x[1][4];
    load_acc<1>(in, q, &kAll, x);
    float res[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) res[j] = hd::sub(x[0][j], E::to_float(E::from_float(x[0][j])));
    store_quad<kOut>(out, q, out_width, x[0]);
    store_floats(in.residual, q, kAll, in.vec, res);
  }
  for (uint64_t i = 4 * quads + thread_index(); i < n; i += thread_count()) {
    const float x = in.load(i);
    store_elem<kOut>(out, i, out_width, x);
    in.residual[i] = hd::sub(x, E::to_float(E::from_float(x)));
  }
}

// dst (kDst) op= payload element (kPay), in float32 and rounded back to kDst.
template <DType kPay, DType kDst, DecodeMode kMode>
__global__ void __launch_bounds__(kThreads)
    decode_kernel(const uint8_t* payload, uint32_t payload_width, uint8_t* dst, uint32_t dst_width, uint64_t n) {
  const uint64_t quads = n / 4;
  for (uint64_t q = thread_index(); q < quads; q += thread_count()) {
    float v[4];
    load_quad<kPay>(payload, q, payload_width, v);
    float d[4] = {};
    if constexpr (kMode != DecodeMode::kOverwrite) load_quad<kDst>(dst, q, dst_width, d);
#pragma unroll
    for (int j = 0; j < 4; ++j) d[j] = apply_mode<kMode>(d[j], v[j]);
    store_quad<kDst>(dst, q, dst_width, d);
  }
  for (uint64_t i = 4 * quads + thread_index(); i < n; i += thread_count()) {
    const float d = kMode == DecodeMode::kOverwrite ? 0.0f : load_elem<kDst>(dst, i, dst_width);
    store_elem<kDst>(dst, i, dst_width, apply_mode<kMode>(d, load_elem<kPay>(payload, i, payload_width)));
  }
}

}  // namespace

Result<uint64_t> encode_dense(const EncodeJob& job, wire::Header&) {
  const DType pt = detail::dense_payload_dtype(job.spec->id, job.dtype);
  const uint64_t bytes = job.n * dtype_size(pt);
  if (job.n == 0) return bytes;
  if (job.residual == nullptr && pt == job.dtype) {
    GW_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(job.payload, job.src, bytes, cudaMemcpyDeviceToDevice, job.stream));
    return bytes;
  }
  if (job.residual != nullptr && job.dtype != DType::kFloat32) {
    return internal_error("dense device encode with error feedback takes float32 only");
  }
  const uint64_t items = job.n / 4 > 0 ? job.n / 4 : job.n;
  const uint32_t out_width = access_width(job.payload, quad_bytes(pt));
  if (job.residual != nullptr) {
    const AccSource in = AccSource::of(job.src, job.residual);
    GW_RETURN_IF_ERROR(with_dtype(pt, [&](auto out) -> Status {
      const auto kernel = feedback_kernel<decltype(out)::value>;
      GW_ASSIGN_OR_RETURN(const unsigned grid, elementwise_grid(kernel, items));
      kernel<<<grid, kThreads, 0, job.stream>>>(in, job.payload, out_width, job.n);
      return Status::ok();
    }));
  } else {
    const auto* src = static_cast<const uint8_t*>(job.src);
    const uint32_t src_width = access_width(src, quad_bytes(job.dtype));
    GW_RETURN_IF_ERROR(with_dtype(job.dtype, [&](auto in) -> Status {
      return with_dtype(pt, [&](auto out) -> Status {
        const auto kernel = convert_kernel<decltype(in)::value, decltype(out)::value>;
        GW_ASSIGN_OR_RETURN(const unsigned grid, elementwise_grid(kernel, items));
        kernel<<<grid, kThreads, 0, job.stream>>>(src, src_width, job.payload, out_width, job.n);
        return Status::ok();
      });
    }));
  }
  GW_RETURN_IF_ERROR(launch_status("dense encode kernel"));
  return bytes;
}

Status decode_dense(const DecodeJob& job) {
  const wire::Header& h = *job.header;
  const DType pt = detail::dense_payload_dtype(h.codec, h.dtype);
  if (h.count == 0) return Status::ok();
  if (pt == DType::kFloat32 && job.dtype == DType::kFloat32 && job.mode == DecodeMode::kOverwrite) {
    return cuda_status(cudaMemcpyAsync(job.dst, job.payload, h.count * 4, cudaMemcpyDeviceToDevice, job.stream),
                       "cudaMemcpyAsync (dense decode)");
  }
  const uint64_t items = h.count / 4 > 0 ? h.count / 4 : h.count;
  const uint32_t payload_width = access_width(job.payload, quad_bytes(pt));
  auto* dst = static_cast<uint8_t*>(job.dst);
  const uint32_t dst_width = access_width(dst, quad_bytes(job.dtype));
  return with_dtype(pt, [&](auto pay) {
    return with_dtype(job.dtype, [&](auto out) {
      return with_mode(job.mode, [&](auto km) -> Status {
        const auto kernel = decode_kernel<decltype(pay)::value, decltype(out)::value, decltype(km)::value>;
        GW_ASSIGN_OR_RETURN(const unsigned grid, elementwise_grid(kernel, items));
        kernel<<<grid, kThreads, 0, job.stream>>>(job.payload, payload_width, dst, dst_width, h.count);
        return launch_status("dense decode kernel");
      });
    });
  });
}

namespace {
Result<uint64_t> encode_dense_row(const EncodeJob& job, wire::Header& header, const uint64_t**) {
  return encode_dense(job, header);
}
}  // namespace

GW_REGISTER_DEVICE_CODEC(CodecId::kNone, encode_dense_row, decode_dense);
GW_REGISTER_DEVICE_CODEC(CodecId::kFp16, encode_dense_row, decode_dense);
GW_REGISTER_DEVICE_CODEC(CodecId::kBf16, encode_dense_row, decode_dense);

}  // namespace gw::kern
