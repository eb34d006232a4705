// none, fp16 and bf16 on the device: element for element what compressors/dense_codec.cpp
// writes. One thread per 4 elements (grid-stride), with the widest loads and stores each
// pointer's alignment allows; plain copies go to cudaMemcpyAsync. Stochastic rounding
// (fp16/bf16 rounding=stochastic) takes Philox block q for elements 4q..4q+3, word i for
// element i of the tail: word i for element i, as the host's philox_fill gives it.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "compressors/dense_layout.hpp"
#include "compressors/philox.hpp"
#include "kernels/device_apply.cuh"
#include "kernels/device_codecs.hpp"

namespace gw::kern {
namespace {

uint32_t quad_bytes(DType dtype) { return 4 * static_cast<uint32_t>(dtype_size(dtype)); }

__device__ __forceinline__ uint64_t thread_index() {
  return static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ uint64_t thread_count() { return static_cast<uint64_t>(gridDim.x) * blockDim.x; }

// v rounded to kOut's bits: to nearest even, or stochastically with the random word r
// (half.hpp's *_sr; float32 never rounds).
template <DType kOut, bool kStochastic>
__device__ __forceinline__ uint32_t round_bits(float v, uint32_t r) {
  if constexpr (kStochastic && kOut == DType::kFloat16) {
    return hd::float_to_half_sr(v, r);
  } else if constexpr (kStochastic && kOut == DType::kBFloat16) {
    return hd::float_to_bf16_sr(v, r);
  } else {
    return Elem<kOut>::from_float(v);
  }
}

// The random words of elements 4q .. 4q+3 (unused when rounding to nearest).
template <bool kStochastic>
__device__ __forceinline__ Philox4 quad_words(const RandomStream& rs, uint64_t q) {
  if constexpr (kStochastic) {
    return rs.block(q);
  } else {
    return Philox4{{0, 0, 0, 0}};
  }
}

template <bool kStochastic>
__device__ __forceinline__ uint32_t elem_word(const RandomStream& rs, uint64_t i) {
  if constexpr (kStochastic) {
    return rs.word(i);
  } else {
    return 0;
  }
}

// Elements 4q .. 4q+3 of kOut, given as their bits (low bytes of each word).
template <DType kOut>
__device__ __forceinline__ void store_quad_bits(uint8_t* base, uint64_t q, uint32_t width, const uint32_t (&b)[4]) {
  using E = Elem<kOut>;
  Raw<4 * E::kBytes> r{};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if constexpr (E::kBytes == 4) {
      r.w[j] = b[j];
    } else {
      r.w[j / 2] |= b[j] << (16 * (j % 2));
    }
  }
  store_raw<4 * E::kBytes>(base + q * 4 * E::kBytes, width, r);
}

template <DType kOut>
__device__ __forceinline__ void store_elem_bits(uint8_t* base, uint64_t i, uint32_t width, uint32_t b) {
  using E = Elem<kOut>;
  store_raw<E::kBytes>(base + i * E::kBytes, width, Raw<E::kBytes>{{b}});
}

// Encode without error feedback: src (kIn) rounded to the payload type (kOut).
template <DType kIn, DType kOut, bool kStochastic>
__global__ void __launch_bounds__(kThreads) convert_kernel(const uint8_t* src, uint32_t src_width, uint8_t* out,
                                                           uint32_t out_width, uint64_t n, RandomStream rs) {
  const uint64_t quads = n / 4;
  for (uint64_t q = thread_index(); q < quads; q += thread_count()) {
    float v[4];
    load_quad<kIn>(src, q, src_width, v);
    const Philox4 rnd = quad_words<kStochastic>(rs, q);
    uint32_t b[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) b[j] = round_bits<kOut, kStochastic>(v[j], rnd.v[j]);
    store_quad_bits<kOut>(out, q, out_width, b);
  }
  for (uint64_t i = 4 * quads + thread_index(); i < n; i += thread_count()) {
    const float v = load_elem<kIn>(src, i, src_width);
    store_elem_bits<kOut>(out, i, out_width, round_bits<kOut, kStochastic>(v, elem_word<kStochastic>(rs, i)));
  }
}

// Encode with error feedback (float32 input): the payload gets acc rounded to kOut, the
// residual acc minus that value read back (acc - acc for none).
template <DType kOut, bool kStochastic>
__global__ void __launch_bounds__(kThreads)
    feedback_kernel(const AccSource in, uint8_t* out, uint32_t out_width, uint64_t n, RandomStream rs) {
  using E = Elem<kOut>;
  const uint64_t quads = n / 4;
  constexpr uint32_t kAll = 0xfu;
  for (uint64_t q = thread_index(); q < quads; q += thread_count()) {
    float x[1][4];
    load_acc<1>(in, q, &kAll, x);
    const Philox4 rnd = quad_words<kStochastic>(rs, q);
    uint32_t b[4];
    float res[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      b[j] = round_bits<kOut, kStochastic>(x[0][j], rnd.v[j]);
      res[j] = hd::sub(x[0][j], E::to_float(b[j]));
    }
    store_quad_bits<kOut>(out, q, out_width, b);
    store_floats(in.residual, q, kAll, in.vec, res);
  }
  for (uint64_t i = 4 * quads + thread_index(); i < n; i += thread_count()) {
    const float x = in.load(i);
    const uint32_t b = round_bits<kOut, kStochastic>(x, elem_word<kStochastic>(rs, i));
    store_elem_bits<kOut>(out, i, out_width, b);
    in.residual[i] = hd::sub(x, E::to_float(b));
  }
}

// Calls fn with std::bool_constant<stochastic>; the stochastic kernels exist only for the
// half-precision payloads.
template <DType kOut, class Fn>
Status with_rounding([[maybe_unused]] bool stochastic, Fn&& fn) {
  if constexpr (kOut != DType::kFloat32) {
    if (stochastic) return fn(std::true_type{});
  }
  return fn(std::false_type{});
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
  const bool stochastic = detail::dense_stochastic(*job.spec);
  const RandomStream rs{job.spec->seed, job.ctx.step, job.ctx.rank};
  if (job.residual != nullptr) {
    const AccSource in = AccSource::of(job.src, job.residual);
    GW_RETURN_IF_ERROR(with_dtype(pt, [&](auto out) -> Status {
      return with_rounding<decltype(out)::value>(stochastic, [&](auto sr) -> Status {
        const auto kernel = feedback_kernel<decltype(out)::value, decltype(sr)::value>;
        GW_ASSIGN_OR_RETURN(const unsigned grid, elementwise_grid(kernel, items));
        kernel<<<grid, kThreads, 0, job.stream>>>(in, job.payload, out_width, job.n, rs);
        return Status::ok();
      });
    }));
  } else {
    const auto* src = static_cast<const uint8_t*>(job.src);
    const uint32_t src_width = access_width(src, quad_bytes(job.dtype));
    GW_RETURN_IF_ERROR(with_dtype(job.dtype, [&](auto in) -> Status {
      return with_dtype(pt, [&](auto out) -> Status {
        return with_rounding<decltype(out)::value>(stochastic, [&](auto sr) -> Status {
          const auto kernel = convert_kernel<decltype(in)::value, decltype(out)::value, decltype(sr)::value>;
          GW_ASSIGN_OR_RETURN(const unsigned grid, elementwise_grid(kernel, items));
          kernel<<<grid, kThreads, 0, job.stream>>>(src, src_width, job.payload, out_width, job.n, rs);
          return Status::ok();
        });
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
