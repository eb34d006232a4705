// What the C ABI needs of an error-feedback state whose residual lives in device memory. The
// CUDA part of the library (kernels/device_codec.hpp, DeviceResidual) implements it, so the
// host-only code can hold, count, reset and read such a state without CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>

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

// Elements [start, start + count) of another state's residual, seen as a state of its own,
// so that a flat device algorithm can run on one shard of a buffer with that shard's part of
// the caller's residual in place (the hierarchical all-reduce's inter-node leg). The step is
// the parent's; the owner-side residual is storage the caller lends (owner(n): n floats) and
// folds back into the residual after the call, so nothing outlives the call in the view.
class DeviceEfShard final : public DeviceEfState {
 public:
  using OwnerStorage = std::function<Result<float*>(size_t n)>;
  DeviceEfShard(DeviceEfState& parent, size_t start, size_t count, OwnerStorage owner)
      : parent_(parent), start_(start), count_(count), owner_(std::move(owner)) {}

  size_t count() const override { return count_; }
  uint64_t step() const override { return parent_.step(); }
  void set_step(uint64_t step) override { parent_.set_step(step); }
  void advance() override { parent_.advance(); }
  float* residual() override { return parent_.residual() + start_; }
  Result<float*> owner_residual(size_t n) override {
    GW_ASSIGN_OR_RETURN(float* p, owner_(n));
    owner_count_ = n;
    return p;
  }
  size_t owner_count() const override { return owner_count_; }
  // A view is not a checkpoint: the parent saves and restores the whole state.
  Status reset() override { return refuse(); }
  Status copy_out(float*, size_t) const override { return refuse(); }
  Status copy_in(const float*, size_t) override { return refuse(); }
  Status copy_owner_out(float*, size_t) const override { return refuse(); }
  Status copy_owner_in(const float*, size_t) override { return refuse(); }

 private:
  static Status refuse() {
    return unsupported("a shard of an error-feedback state is saved and restored through its parent");
  }
  DeviceEfState& parent_;
  size_t start_;
  size_t count_;
  OwnerStorage owner_;
  size_t owner_count_ = 0;
};

}  // namespace gw
