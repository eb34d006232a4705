#include "kernels/device_codec.hpp"

#include <string>

#include "compressors/codec_registry.hpp"
#include "compressors/sparse_layout.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_codecs.hpp"
#include "kernels/header_kernel.hpp"

namespace gw::kern {

Result<int> device_count() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return cuda_status(err, "cudaGetDeviceCount");
  }
  if (count == 0) return Status(Code::kCuda, "cudaGetDeviceCount: no CUDA device");
  return count;
}

Status device_ready() { return device_count().status(); }

bool is_device_pointer(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

namespace {

Status check_device(const void* p, const char* name) {
  if (!is_device_pointer(p)) {
    return invalid_argument(std::string(name) + " is not device memory (cudaMalloc or managed)");
  }
  return Status::ok();
}

bool sparse_indices(CodecId id) { return id == CodecId::kTopk || id == CodecId::kDgc; }

}  // namespace

Result<std::unique_ptr<DeviceResidual>> DeviceResidual::create(size_t count) {
  if (count > wire::kMaxCount) return invalid_argument("count " + std::to_string(count) + " exceeds 2^48");
  GW_RETURN_IF_ERROR(device_ready());
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, count > 0 ? count * sizeof(float) : 1);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status(err == cudaErrorMemoryAllocation ? Code::kOutOfMemory : Code::kCuda,
                  "error-feedback residual of " + std::to_string(count) + " floats: " + cudaGetErrorString(err));
  }
  std::unique_ptr<DeviceResidual> r(new DeviceResidual(static_cast<float*>(p), count));
  GW_RETURN_IF_ERROR(r->reset());
  return r;
}

DeviceResidual::~DeviceResidual() {
  cudaFree(data_);
  cudaFree(owner_);
}

Status DeviceResidual::reset() {
  if (count_ > 0) GW_CUDA_RETURN_IF_ERROR(cudaMemset(data_, 0, count_ * sizeof(float)));
  if (owner_count_ > 0) GW_CUDA_RETURN_IF_ERROR(cudaMemset(owner_, 0, owner_count_ * sizeof(float)));
  GW_RETURN_IF_ERROR(zeroed());
  step_ = 0;
  return Status::ok();
}

// cudaMemset on device memory may return before it is done, on the legacy stream, with which
// non-blocking streams (the collectives', often the caller's) do not synchronize: wait for it.
Status DeviceResidual::zeroed() { return cuda_status(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize"); }

Result<float*> DeviceResidual::owner_residual(size_t n) {
  if (owner_ != nullptr && owner_count_ == n) return owner_;
  // Rare (the owner's segment changes size with the rank count or the algorithm), so the
  // synchronous calls are acceptable here.
  if (owner_ != nullptr) GW_CUDA_RETURN_IF_ERROR(cudaFree(owner_));
  owner_ = nullptr;
  owner_count_ = 0;
  void* p = nullptr;
  GW_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, n > 0 ? n * sizeof(float) : 1));
  owner_ = static_cast<float*>(p);
  owner_count_ = n;
  if (n > 0) GW_CUDA_RETURN_IF_ERROR(cudaMemset(owner_, 0, n * sizeof(float)));
  GW_RETURN_IF_ERROR(zeroed());
  return owner_;
}

Status DeviceResidual::copy_out(float* host, size_t count) const {
  if (count != count_) {
    return invalid_argument("count " + std::to_string(count) + " differs from the state's " + std::to_string(count_));
  }
  // Not a hot path: the whole device, so that work on non-blocking streams is in too.
  GW_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  if (count > 0) GW_CUDA_RETURN_IF_ERROR(cudaMemcpy(host, data_, count * sizeof(float), cudaMemcpyDeviceToHost));
  return Status::ok();
}

Status DeviceResidual::copy_in(const float* host, size_t count) {
  if (count != count_) {
    return invalid_argument("count " + std::to_string(count) + " differs from the state's " + std::to_string(count_));
  }
  // Not a hot path: nothing may still be using the residual on any stream.
  GW_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  if (count > 0) GW_CUDA_RETURN_IF_ERROR(cudaMemcpy(data_, host, count * sizeof(float), cudaMemcpyHostToDevice));
  return Status::ok();
}

Status DeviceResidual::copy_owner_out(float* host, size_t n) const {
  if (n != owner_count_) {
    return invalid_argument("owner residual holds " + std::to_string(owner_count_) + " floats, not " + std::to_string(n));
  }
  GW_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  if (n > 0) GW_CUDA_RETURN_IF_ERROR(cudaMemcpy(host, owner_, n * sizeof(float), cudaMemcpyDeviceToHost));
  return Status::ok();
}

Status DeviceResidual::copy_owner_in(const float* host, size_t n) {
  GW_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  GW_ASSIGN_OR_RETURN(float* o, owner_residual(n));
  if (n > 0) GW_CUDA_RETURN_IF_ERROR(cudaMemcpy(o, host, n * sizeof(float), cudaMemcpyHostToDevice));
  return Status::ok();
}

Result<size_t> DeviceEncoder::encode(const void* src, size_t n, DType dtype, const EncodeContext& ctx,
                                     DeviceResidual* ef, void* out, size_t cap, cudaStream_t stream) {
  if (ef == nullptr) return run(src, nullptr, n, dtype, ctx, out, cap, stream);
  if (ef->count() != n) {
    return invalid_argument("error-feedback state holds " + std::to_string(ef->count()) +
                            " elements but count is " + std::to_string(n));
  }
  if (dtype != DType::kFloat32) return unsupported("error feedback takes float32 input only");
  if (src == nullptr && n > 0) return invalid_argument("src is null");
  GW_ASSIGN_OR_RETURN(size_t written, run(src, ef->data(), n, dtype, ctx, out, cap, stream));
  ef->advance();
  return written;
}

Result<size_t> DeviceEncoder::encode_accumulated(float* acc, size_t n, const EncodeContext& ctx, void* out,
                                                 size_t cap, cudaStream_t stream) {
  if (acc == nullptr && n > 0) return invalid_argument("residual buffer is null");
  return run(nullptr, acc, n, DType::kFloat32, ctx, out, cap, stream);
}

Result<size_t> DeviceEncoder::run(const void* src, float* residual, size_t n, DType dtype,
                                  const EncodeContext& ctx, void* out, size_t cap, cudaStream_t stream) {
  if (!dtype_valid(static_cast<int>(dtype))) return invalid_argument("dtype is not a gw_dtype_t");
  if (!codec_.accepts(dtype)) {
    return unsupported(std::string("codec ") + codec_name(codec_.id()) + " does not take " + dtype_name(dtype) +
                       " input (lossy codecs take float32)");
  }
  if (n > wire::kMaxCount) return invalid_argument("count " + std::to_string(n) + " exceeds 2^48");
  if (src == nullptr && residual == nullptr && n > 0) return invalid_argument("src is null");
  if (out == nullptr) return invalid_argument("dst is null");
  const size_t need = codec_.max_encoded_bytes(n, dtype);
  if (cap < need) {
    return buffer_too_small("dst capacity " + std::to_string(cap) + " bytes is below the " + std::to_string(need) +
                            " that max_encoded_bytes promises");
  }
  if (reinterpret_cast<uintptr_t>(out) % 8 != 0) return invalid_argument("device dst must be 8-byte aligned");
  GW_RETURN_IF_ERROR(check_device(out, "dst"));
  if (n > 0 && src != nullptr) GW_RETURN_IF_ERROR(check_device(src, "src"));
  if (n > 0 && residual != nullptr) GW_RETURN_IF_ERROR(check_device(residual, "error-feedback residual"));

  auto* bytes = static_cast<uint8_t*>(out);
  wire::Header header;
  if (n == 0) {
    // Nothing to compute: the host codec writes the header (its codec fields for n = 0).
    uint8_t host[wire::kHeaderBytes];
    GW_ASSIGN_OR_RETURN(size_t len, codec_.encode(nullptr, 0, dtype, ctx, host, sizeof host));
    GW_ASSIGN_OR_RETURN(header, wire::read_header(host, len));
    GW_RETURN_IF_ERROR(write_header_async(header, bytes, stream));
    return len;
  }
  header.codec = codec_.id();
  header.dtype = dtype;
  header.count = n;
  const EncodeJob job{src, residual, n, dtype, &codec_.spec(), ctx, bytes + wire::kHeaderBytes, &scratch_, stream};
  Result<uint64_t> payload = internal_error("no device encoder");
  switch (codec_.id()) {
    case CodecId::kNone:
    case CodecId::kFp16:
    case CodecId::kBf16: payload = encode_dense(job, header); break;
    case CodecId::kQsgd: payload = encode_qsgd(job, header); break;
    case CodecId::kSign: payload = encode_sign(job, header); break;
    case CodecId::kTopk: payload = encode_topk(job, header); break;
    case CodecId::kDgc: payload = encode_dgc(job, header); break;
    case CodecId::kRandomk: payload = encode_randomk(job, header); break;
  }
  if (!payload) return payload.status().with_context(std::string(codec_name(codec_.id())) + " device encode");
  header.payload_bytes = *payload;
  GW_RETURN_IF_ERROR(write_header_async(header, bytes, stream));
  return wire::kHeaderBytes + *payload;
}

Status apply_validated(const wire::Header& header, const uint8_t* payload, void* dst, DType dtype,
                       DecodeMode mode, cudaStream_t stream) {
  if (header.count == 0) return Status::ok();
  const DecodeJob job{&header, payload, dst, dtype, mode, stream};
  switch (header.codec) {
    case CodecId::kNone:
    case CodecId::kFp16:
    case CodecId::kBf16: return decode_dense(job);
    case CodecId::kQsgd: return decode_qsgd(job);
    case CodecId::kSign: return decode_sign(job);
    case CodecId::kTopk:
    case CodecId::kDgc: return decode_sparse(job);
    case CodecId::kRandomk: return decode_randomk(job);
  }
  return internal_error("no device decoder for codec " + std::to_string(static_cast<int>(header.codec)));
}

namespace {

// Runs check_sparse_indices and reads its verdict back (waits on stream).
Status check_indices_on_device(const wire::Header& header, const uint8_t* payload, cudaStream_t stream) {
  if (header.k == 0) return Status::ok();
  void* flag = nullptr;
  GW_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&flag, sizeof(uint32_t), stream));
  auto* bad = static_cast<uint32_t*>(flag);
  uint32_t verdict = 0;
  Status s = cuda_status(cudaMemsetAsync(bad, 0, sizeof(uint32_t), stream), "cudaMemsetAsync");
  if (s) s = check_sparse_indices(header, payload, bad, stream);
  if (s) s = cuda_status(cudaMemcpyAsync(&verdict, bad, sizeof verdict, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
  const Status freed = cuda_status(cudaFreeAsync(flag, stream), "cudaFreeAsync");
  if (s) s = cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  if (!s) return s;
  if (!freed) return freed;
  if (verdict != 0) {
    return invalid_message("an index is out of range (count " + std::to_string(header.count) +
                           ") or not strictly increasing");
  }
  return Status::ok();
}

}  // namespace

Status decode_device(const void* msg, size_t len, void* dst, size_t n, DType dtype, DecodeMode mode,
                     cudaStream_t stream) {
  if (!dtype_valid(static_cast<int>(dtype))) return invalid_argument("dtype is not a gw_dtype_t");
  if (static_cast<int>(mode) > static_cast<int>(DecodeMode::kSubtract)) {
    return invalid_argument("mode is not a gw_decode_mode_t");
  }
  if (msg == nullptr) return invalid_argument("msg is null");
  if (dst == nullptr && n > 0) return invalid_argument("dst is null");
  GW_RETURN_IF_ERROR(check_device(msg, "msg"));
  if (n > 0) GW_RETURN_IF_ERROR(check_device(dst, "dst"));

  uint8_t host[wire::kHeaderBytes] = {};
  const size_t head = len < wire::kHeaderBytes ? len : wire::kHeaderBytes;
  if (head > 0) {
    GW_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host, msg, head, cudaMemcpyDeviceToHost, stream));
    GW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  }
  GW_ASSIGN_OR_RETURN(wire::Header header, wire::read_header(host, len));
  const detail::CodecEntry* entry = detail::find_codec(header.codec);
  if (entry == nullptr) return invalid_message("unknown codec id");
  const auto* payload = static_cast<const uint8_t*>(msg) + wire::kHeaderBytes;
  if (sparse_indices(header.codec)) {
    GW_RETURN_IF_ERROR(detail::validate_sparse_fields(header).with_context(entry->name));
    GW_RETURN_IF_ERROR(check_indices_on_device(header, payload, stream).with_context(entry->name));
  } else {
    uint64_t nnz = 0;
    GW_RETURN_IF_ERROR(entry->validate(header, nullptr, nnz).with_context(entry->name));
  }
  if (header.count != n) {
    return invalid_message("message decodes to " + std::to_string(header.count) +
                           " elements but the destination holds " + std::to_string(n));
  }
  if (!entry->any_dst_dtype && dtype != DType::kFloat32) {
    return unsupported(std::string(entry->name) + " messages decode into float32 only, not " + dtype_name(dtype));
  }
  return apply_validated(header, payload, dst, dtype, mode, stream);
}

}  // namespace gw::kern
