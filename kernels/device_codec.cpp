#include "kernels/device_codec.hpp"
#include "kernels/device_scratch.hpp"

#include <memory>
#include <string>

#include "common/cuda_check.hpp"
#include "compressors/codec_registry.hpp"
#include "compressors/sparse_layout.hpp"
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

// The device decode checks index-carrying payloads on the device (decode_sparse_untrusted).
bool sparse_indices(const detail::CodecEntry& entry) { return entry.has(detail::kCapIndices); }

Status no_device_codec(CodecId id) {
  return unsupported(std::string("codec ") + codec_name(id) + " has no device implementation (host buffers only)");
}

}  // namespace

Result<std::unique_ptr<DeviceResidual>> DeviceResidual::create(size_t count) {
  if (count > wire::kMaxCount) return invalid_argument("count " + std::to_string(count) + " exceeds 2^48");
  GW_RETURN_IF_ERROR(device_ready());
  void* p = nullptr;
  // The caller's allocator where one is set (gw_set_device_allocator), else cudaMalloc.
  const cudaError_t err = stream_alloc(&p, count > 0 ? count * sizeof(float) : 1, nullptr, nullptr, false);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status(err == cudaErrorMemoryAllocation ? Code::kOutOfMemory : Code::kCuda,
                  "error-feedback residual of " + std::to_string(count) + " floats: " + cudaGetErrorString(err));
  }
  std::unique_ptr<DeviceResidual> r(new DeviceResidual(static_cast<float*>(p), count));
  GW_RETURN_IF_ERROR(zero_fresh(r->data_, count));
  return r;
}

// Memory just allocated, which no stream has seen: zeroed on a stream of its own and waited
// for there only, so making a state never waits for the caller's work on the device.
Status DeviceResidual::zero_fresh(float* p, size_t n) {
  if (n == 0) return Status::ok();
  cudaStream_t s = nullptr;
  GW_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaError_t err = cudaMemsetAsync(p, 0, n * sizeof(float), s);
  const cudaError_t synced = cudaStreamSynchronize(s);
  if (err == cudaSuccess) err = synced;
  cudaStreamDestroy(s);
  return cuda_status(err, "zeroing a new residual");
}

DeviceResidual::~DeviceResidual() {
  if (data_ != nullptr) stream_release(data_, nullptr, false);
  if (owner_ != nullptr) stream_release(owner_, nullptr, false);
}

// Not a hot path (a reset, a new owner segment). The residual may be in use on any stream,
// and the legacy stream does not order against non-blocking ones (nor against a per-thread
// default stream), so the whole device is waited for before and after the zeroing.
Status DeviceResidual::zero(float* p, size_t n) {
  if (n == 0) return Status::ok();
  GW_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  GW_CUDA_RETURN_IF_ERROR(cudaMemset(p, 0, n * sizeof(float)));
  return cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

Status DeviceResidual::reset() {
  GW_RETURN_IF_ERROR(zero(data_, count_));
  GW_RETURN_IF_ERROR(zero(owner_, owner_count_));
  step_ = 0;
  return Status::ok();
}

Result<float*> DeviceResidual::owner_residual(size_t n) {
  if (owner_ != nullptr && owner_count_ == n) return owner_;
  // Rare (the owner's segment changes size with the rank count or the algorithm), so the
  // synchronous calls are acceptable here.
  if (owner_ != nullptr) GW_CUDA_RETURN_IF_ERROR(stream_release(owner_, nullptr, false));
  owner_ = nullptr;
  owner_count_ = 0;
  void* p = nullptr;
  GW_CUDA_RETURN_IF_ERROR(stream_alloc(&p, n > 0 ? n * sizeof(float) : 1, nullptr, nullptr, false));
  owner_ = static_cast<float*>(p);
  owner_count_ = n;
  GW_RETURN_IF_ERROR(zero_fresh(owner_, n));
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
    return invalid_argument("owner residual holds " + std::to_string(owner_count_) + " floats, not " +
                            std::to_string(n));
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

Result<EncodedSize> DeviceEncoder::encode(const void* src, size_t n, DType dtype, const EncodeContext& ctx,
                                          DeviceResidual* ef, void* out, size_t cap, cudaStream_t stream) const {
  if (ef == nullptr) return run(src, nullptr, n, dtype, ctx, out, cap, stream);
  if (ef->count() != n) {
    return invalid_argument("error-feedback state holds " + std::to_string(ef->count()) + " elements but count is " +
                            std::to_string(n));
  }
  if (dtype != DType::kFloat32) return unsupported("error feedback takes float32 input only");
  if (src == nullptr && n > 0) return invalid_argument("src is null");
  GW_ASSIGN_OR_RETURN(EncodedSize written, run(src, ef->data(), n, dtype, ctx, out, cap, stream));
  ef->advance();
  return written;
}

Result<EncodedSize> DeviceEncoder::encode_accumulated(float* acc, size_t n, const EncodeContext& ctx, void* out,
                                                      size_t cap, cudaStream_t stream) const {
  if (acc == nullptr && n > 0) return invalid_argument("residual buffer is null");
  return run(nullptr, acc, n, DType::kFloat32, ctx, out, cap, stream);
}

Result<EncodedSize> DeviceEncoder::run(const void* src, float* residual, size_t n, DType dtype,
                                       const EncodeContext& ctx, void* out, size_t cap, cudaStream_t stream) const {
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
    // Nothing to compute: a host codec writes the header (its codec fields for n = 0). A
    // fresh one, since the encoder's codec is shared with whoever else encodes with it.
    uint8_t host[wire::kHeaderBytes];
    GW_ASSIGN_OR_RETURN(std::unique_ptr<Codec> fresh, Codec::create(codec_.spec()));
    GW_ASSIGN_OR_RETURN(size_t len, fresh->encode(nullptr, 0, dtype, ctx, host, sizeof host));
    GW_ASSIGN_OR_RETURN(header, wire::read_header(host, len));
    GW_RETURN_IF_ERROR(write_header_async(header, bytes, stream));
    return EncodedSize{len, true};
  }
  header.codec = codec_.id();
  header.dtype = dtype;
  header.count = n;
  // Released in stream order when this call returns, after the work that uses it.
  DeviceScratch scratch(stream);
  const EncodeJob job{src, residual, n, dtype, &codec_.spec(), ctx, bytes + wire::kHeaderBytes, &scratch, stream};
  const uint64_t* kept = nullptr;
  const DeviceCodecOps* ops = find_device_codec(codec_.id());
  if (ops == nullptr) return no_device_codec(codec_.id());
  Result<uint64_t> payload = ops->encode(job, header, &kept);
  if (!payload) return payload.status().with_context(std::string(codec_name(codec_.id())) + " device encode");
  header.payload_bytes = *payload;
  GW_RETURN_IF_ERROR(write_header_async(header, bytes, stream, kept, detail::index_bytes(n)));
  return EncodedSize{wire::kHeaderBytes + *payload, kept == nullptr};
}

Status apply_validated(const wire::Header& header, const uint8_t* payload, void* dst, DType dtype, DecodeMode mode,
                       cudaStream_t stream) {
  if (header.count == 0) return Status::ok();
  const DecodeJob job{&header, payload, dst, dtype, mode, stream};
  const DeviceCodecOps* ops = find_device_codec(header.codec);
  if (ops == nullptr) return no_device_codec(header.codec);
  return ops->decode(job);
}

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
  if (len < wire::kHeaderBytes) {
    const uint8_t none = 0;
    return wire::read_header(&none, len).status();
  }

  // One round trip. The device checks the message as a topk/dgc message of n float32 and
  // applies it only if it is one (and every index is sound) while its header comes back;
  // the host then reads the header: for a sparse codec it reports the device's verdict (or
  // its own, more precise, error), for a dense codec, which needs no check on the device,
  // it enqueues the decode.
  const auto* bytes = static_cast<const uint8_t*>(msg);
  DeviceScratch scratch(stream);
  SparseVerdict back{};
  const bool may_be_sparse = dtype == DType::kFloat32 && n <= wire::kMaxCount;
  if (may_be_sparse) {
    GW_ASSIGN_OR_RETURN(SparseVerdict * verdict, scratch.get<SparseVerdict>(0, 1));
    GW_RETURN_IF_ERROR(decode_sparse_untrusted(bytes, len, static_cast<float*>(dst), n, mode, verdict, stream));
    GW_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&back, verdict, sizeof back, cudaMemcpyDeviceToHost, stream));
  } else {
    GW_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(back.header, bytes, wire::kHeaderBytes, cudaMemcpyDeviceToHost, stream));
  }
  GW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));

  GW_ASSIGN_OR_RETURN(wire::Header header, wire::read_header(back.header, len));
  const detail::CodecEntry* entry = detail::find_codec(header.codec);
  if (entry == nullptr) return invalid_message("unknown codec id");
  if (sparse_indices(*entry)) {
    GW_RETURN_IF_ERROR(detail::validate_sparse_fields(header).with_context(entry->name));
  } else {
    uint64_t nnz = 0;
    GW_RETURN_IF_ERROR(entry->validate(header, nullptr, nnz).with_context(entry->name));
  }
  if (header.count != n) {
    return invalid_message("message decodes to " + std::to_string(header.count) +
                           " elements but the destination holds " + std::to_string(n));
  }
  if (!entry->has(detail::kCapAnyDtype) && dtype != DType::kFloat32) {
    return unsupported(std::string(entry->name) + " messages decode into float32 only, not " + dtype_name(dtype));
  }
  if (!sparse_indices(*entry)) {
    const auto* payload = bytes + wire::kHeaderBytes;
    return apply_validated(header, payload, dst, dtype, mode, stream);
  }
  if (back.index_bad != 0) {
    return invalid_message(std::string(entry->name) + ": an index is out of range (count " +
                           std::to_string(header.count) + ") or not strictly increasing");
  }
  if (back.header_bad != 0) {
    return internal_error(std::string(entry->name) + ": the device refused a header that the host accepts");
  }
  return Status::ok();  // applied on the device
}

}  // namespace gw::kern
