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

  // For the device collectives (collectives/device_*.cpp): the residual (count floats of
  // device memory), the owner-side residual (n floats, zeroed when first made, as
  // gw::ErrorFeedback's), and the step counter.
  virtual float* residual() = 0;
  virtual Result<float*> owner_residual(size_t n) = 0;
  virtual void advance() = 0;
};

}  // namespace gw
