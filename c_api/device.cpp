// The device-memory half of the codec C ABI: argument checks, then kernels/device_codec.hpp.
#include <memory>
#include <mutex>
#include <string>

#include "c_api/handles.hpp"
#include "c_api/support.hpp"
#include "common/cuda_check.hpp"
#include "compressors/wire_header.hpp"
#include "gradwire/gradwire.h"
#include "kernels/device_codec.hpp"
#include "kernels/device_codecs.hpp"
#include "kernels/device_scratch.hpp"

namespace {

using gw::Status;
using gw::capi::guard;
using gw::capi::null_arg;

Status check_enums(gw_dtype_t dtype) {
  if (!gw::dtype_valid(static_cast<int>(dtype))) {
    return gw::invalid_argument("dtype " + std::to_string(static_cast<int>(dtype)) + " is not a gw_dtype_t");
  }
  return Status::ok();
}

// Made on a codec's first device encode; encodes may come from several threads at once.
gw::kern::DeviceEncoder& encoder_of(gw_codec_t codec) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (!codec->device) codec->device = std::make_shared<gw::kern::DeviceEncoder>(*codec->codec);
  return *static_cast<gw::kern::DeviceEncoder*>(codec->device.get());
}

// Both encode entry points: checks, then the encode; never waits.
gw::Result<gw::kern::EncodedSize> encode(gw_codec_t codec, const void* src, size_t count, gw_dtype_t dtype,
                                         uint64_t step, uint32_t rank, gw_ef_state_t ef, void* dst, size_t capacity,
                                         void* stream) {
  if (codec == nullptr) return null_arg("codec");
  GW_RETURN_IF_ERROR(check_enums(dtype));
  gw::kern::DeviceResidual* residual = nullptr;
  if (ef != nullptr) {
    if (!ef->device) return gw::invalid_argument("ef is a host state: make it with gw_ef_state_create_device");
    residual = static_cast<gw::kern::DeviceResidual*>(ef->device.get());
  }
  GW_RETURN_IF_ERROR(gw::kern::device_ready());
  return encoder_of(codec).encode(src, count, static_cast<gw::DType>(dtype), gw::EncodeContext{step, rank}, residual,
                                  dst, capacity, static_cast<cudaStream_t>(stream));
}

}  // namespace

extern "C" {

gw_result_t gw_cuda_device_count(int* count) {
  return guard("gw_cuda_device_count", [&]() -> Status {
    if (count == nullptr) return null_arg("count");
    *count = 0;
    GW_ASSIGN_OR_RETURN(*count, gw::kern::device_count());
    return Status::ok();
  });
}

gw_result_t gw_set_device_allocator(gw_device_alloc_fn alloc, gw_device_free_fn free_fn, void* user) {
  return guard("gw_set_device_allocator", [&]() -> Status {
    if ((alloc == nullptr) != (free_fn == nullptr)) {
      return gw::invalid_argument("alloc and free_fn must both be set, or both be null");
    }
    gw::kern::set_device_allocator(alloc, free_fn, user);
    return Status::ok();
  });
}

gw_result_t gw_ef_state_create_device(size_t count, gw_ef_state_t* ef) {
  return guard("gw_ef_state_create_device", [&]() -> Status {
    if (ef == nullptr) return null_arg("ef");
    *ef = nullptr;
    GW_ASSIGN_OR_RETURN(std::unique_ptr<gw::kern::DeviceResidual> r, gw::kern::DeviceResidual::create(count));
    auto* state = new gw_ef_state_s(0);
    state->device = std::move(r);
    *ef = state;
    return Status::ok();
  });
}

gw_result_t gw_encode_device(gw_codec_t codec, const void* src, size_t count, gw_dtype_t dtype, uint64_t step,
                             uint32_t rank, gw_ef_state_t ef, void* dst, size_t capacity, size_t* written,
                             void* stream) {
  return guard("gw_encode_device", [&]() -> Status {
    if (written == nullptr) return null_arg("written");
    *written = 0;
    GW_ASSIGN_OR_RETURN(gw::kern::EncodedSize size,
                        encode(codec, src, count, dtype, step, rank, ef, dst, capacity, stream));
    if (!size.exact) {
      // The documented wait: the length is in the header the device wrote.
      uint8_t head[gw::wire::kHeaderBytes];
      auto s = static_cast<cudaStream_t>(stream);
      GW_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(head, dst, sizeof head, cudaMemcpyDeviceToHost, s));
      GW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
      GW_ASSIGN_OR_RETURN(size.bytes, gw::wire::encoded_length(head, size.bytes));
    }
    *written = size.bytes;
    return Status::ok();
  });
}

gw_result_t gw_encode_device_async(gw_codec_t codec, const void* src, size_t count, gw_dtype_t dtype, uint64_t step,
                                   uint32_t rank, gw_ef_state_t ef, void* dst, size_t capacity, size_t* max_written,
                                   void* stream) {
  return guard("gw_encode_device_async", [&]() -> Status {
    if (max_written == nullptr) return null_arg("max_written");
    *max_written = 0;
    GW_ASSIGN_OR_RETURN(gw::kern::EncodedSize size,
                        encode(codec, src, count, dtype, step, rank, ef, dst, capacity, stream));
    *max_written = size.bytes;
    return Status::ok();
  });
}

gw_result_t gw_decode_device(const void* msg, size_t len, void* dst, size_t count, gw_dtype_t dtype,
                             gw_decode_mode_t mode, void* stream) {
  return guard("gw_decode_device", [&]() -> Status {
    if (msg == nullptr) return null_arg("msg");
    GW_RETURN_IF_ERROR(check_enums(dtype));
    if (static_cast<int>(mode) < 0 || static_cast<int>(mode) > GW_DECODE_SUBTRACT) {
      return gw::invalid_argument("mode " + std::to_string(static_cast<int>(mode)) + " is not a gw_decode_mode_t");
    }
    GW_RETURN_IF_ERROR(gw::kern::device_ready());
    return gw::kern::decode_device(msg, len, dst, count, static_cast<gw::DType>(dtype),
                                   static_cast<gw::DecodeMode>(mode), static_cast<cudaStream_t>(stream));
  });
}

}  // extern "C"

bool gw::capi::has_device_codec(uint8_t codec_id) {
  return gw::kern::find_device_codec(static_cast<gw::CodecId>(codec_id)) != nullptr;
}
