// What the C ABI needs of an error-feedback state whose residual lives in device memory. The
// CUDA part of the library (kernels/device_codec.hpp, DeviceResidual) implements it, so the
// host-only code can hold, count, reset and read such a state without CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gradwire/status.hpp"

namespace gw {

class DeviceEfState {
 public:
  virtual ~DeviceEfState() = default;
  virtual size_t count() const = 0;
  virtual uint64_t step() const = 0;
  virtual Status reset() = 0;
  // Copies the residual (count floats) to host memory.
  virtual Status copy_out(float* host, size_t count) const = 0;
  // Restoring a checkpoint: the residual from host memory (count floats), the step, and the
  // owner-side residual (owner_count floats out; copy_owner_in makes it n floats).
  virtual Status copy_in(const float* host, size_t count) = 0;
  virtual void set_step(uint64_t step) = 0;
  virtual size_t owner_count() const = 0;
  virtual Status copy_owner_out(float* host, size_t n) const = 0;
  virtual Status copy_owner_in(const float* host, size_t n) = 0;

  // For the device collectives (collectives/device_*.cpp): the residual (count floats of
  // device memory), the owner-side residual (n floats, zeroed when first made, as
  // gw::ErrorFeedback's), and the step counter.
  virtual float* residual() = 0;
  virtual Result<float*> owner_residual(size_t n) = 0;
  virtual void advance() = 0;
};

}  // namespace gw
