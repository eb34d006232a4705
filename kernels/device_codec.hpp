// Codecs on device memory: encode and decode with the same wire bytes as the host codecs
// (compressors/), on a caller's CUDA stream. The C ABI (gw_encode_device, gw_decode_device)
// and the collectives use this; the per-codec kernels sit behind kernels/device_codecs.hpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "compressors/device_ef_state.hpp"
#include "compressors/wire_header.hpp"
#include "gradwire/codec.hpp"
#include "gradwire/status.hpp"
#include "kernels/device_scratch.hpp"

namespace gw::kern {

// Usable CUDA devices (at least one), or why there are none (no driver, no device).
Result<int> device_count();
// Ok when this process can run kernels; otherwise why not (no driver, no device).
Status device_ready();
// True for memory a kernel can write: device or managed allocations.
bool is_device_pointer(const void* p);

// Error-feedback state with its residual in device memory (of the device current at
// creation): count floats, zeroed, and the step counter.
class DeviceResidual final : public DeviceEfState {
 public:
  static Result<std::unique_ptr<DeviceResidual>> create(size_t count);
  ~DeviceResidual() override;
  DeviceResidual(const DeviceResidual&) = delete;
  DeviceResidual& operator=(const DeviceResidual&) = delete;

  float* data() { return data_; }
  size_t count() const override { return count_; }
  uint64_t step() const override { return step_; }
  void advance() override { ++step_; }
  float* residual() override { return data_; }
  // Made (zeroed) on first use and whenever n changes, as gw::ErrorFeedback's.
  Result<float*> owner_residual(size_t n) override;
  // Zeroes the residual and the step (waits for the device: not a hot path).
  Status reset() override;
  // Copies the residual to host memory (waits for work in flight on every stream).
  Status copy_out(float* host, size_t count) const override;
  Status copy_in(const float* host, size_t count) override;
  void set_step(uint64_t step) override { step_ = step; }
  size_t owner_count() const override { return owner_count_; }
  Status copy_owner_out(float* host, size_t n) const override;
  Status copy_owner_in(const float* host, size_t n) override;

 private:
  DeviceResidual(float* data, size_t count) : data_(data), count_(count) {}
  static Status zero(float* p, size_t n);
  static Status zero_fresh(float* p, size_t n);
  float* data_;
  size_t count_;
  uint64_t step_ = 0;
  float* owner_ = nullptr;
  size_t owner_count_ = 0;
};

// How long a device message is, as far as the call that enqueued its encode knows: exactly,
// or (dgc, whose count only the device knows) at most `bytes`, the exact length being in the
// header the device writes (wire::encoded_length on a host copy of its first bytes).
struct EncodedSize {
  size_t bytes;
  bool exact;
};

// Encodes device buffers with one codec. Holds no mutable state: its scratch is taken per
// call, stream-ordered, on the call's stream (device_scratch.hpp), so encodes may run on
// several streams at once.
class DeviceEncoder {
 public:
  explicit DeviceEncoder(const Codec& codec) : codec_(codec) {}

  // Writes the message for n elements at src (device) into out (device, 8-byte aligned,
  // cap >= codec.max_encoded_bytes). With ef, encodes src + residual and leaves the new
  // residual in ef, then advances ef's step. Only enqueues work on stream; never waits.
  Result<EncodedSize> encode(const void* src, size_t n, DType dtype, const EncodeContext& ctx, DeviceResidual* ef,
                             void* out, size_t cap, cudaStream_t stream) const;
  // encode_accumulated for device memory: acc (device) already holds g + residual; on return
  // it holds what the message failed to carry.
  Result<EncodedSize> encode_accumulated(float* acc, size_t n, const EncodeContext& ctx, void* out, size_t cap,
                                         cudaStream_t stream) const;

 private:
  Result<EncodedSize> run(const void* src, float* residual, size_t n, DType dtype, const EncodeContext& ctx, void* out,
                          size_t cap, cudaStream_t stream) const;

  const Codec& codec_;
};

// Decodes a message in device memory into dst (device). The message is untrusted: it is
// checked (a topk or dgc message's indices on the device) before dst is touched, and on
// error dst is untouched. Waits on stream once, for the header and the device's verdict; a
// sparse message is already applied then, a dense one is enqueued after.
Status decode_device(const void* msg, size_t len, void* dst, size_t n, DType dtype, DecodeMode mode,
                     cudaStream_t stream);

// Applies a message that the host already validated in full (wire::read_header and the
// codec's validator over a host copy) and whose payload is now in device memory. Only
// enqueues work: the path for collectives that receive into host memory.
Status apply_validated(const wire::Header& header, const uint8_t* payload, void* dst, DType dtype, DecodeMode mode,
                       cudaStream_t stream);

}  // namespace gw::kern
