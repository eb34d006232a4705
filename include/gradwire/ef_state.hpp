// Error-feedback state for one gradient buffer: the fp32 residual of what earlier messages
// failed to carry, and a step counter. A second, owner-side residual serves collectives
// that compress again after reducing (the chunk an owner re-encodes for the all-gather).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gradwire/export.h"
#include "gradwire/status.hpp"

namespace gw {

class GW_API ErrorFeedback {
 public:
  explicit ErrorFeedback(size_t count);
  // A state over count elements of whole's residual from element start (the hierarchical
  // all-reduce's shard): its residual is whole's memory, which must outlive it; its step and
  // owner-side residual are its own. Copies of a view are views of the same memory.
  ErrorFeedback(ErrorFeedback& whole, size_t start, size_t count);
  ErrorFeedback(const ErrorFeedback& other);
  ErrorFeedback(ErrorFeedback&& other) noexcept;
  ErrorFeedback& operator=(const ErrorFeedback& other);
  ErrorFeedback& operator=(ErrorFeedback&& other) noexcept;
  ~ErrorFeedback() = default;

  size_t count() const { return count_; }
  uint64_t step() const { return step_; }
  void advance() { ++step_; }
  void set_step(uint64_t step) { step_ = step; }
  void reset();

  float* residual() { return data_; }
  const float* residual() const { return data_; }

  // Owner-side residual, sized on first use by the collective that needs it.
  float* owner_residual(size_t count);
  size_t owner_count() const { return owner_residual_.size(); }
  const float* owner_residual() const { return owner_residual_.data(); }

 private:
  std::vector<float> storage_;  // the residual, unless this is a view
  float* data_ = nullptr;
  size_t count_ = 0;
  bool view_ = false;
  std::vector<float> owner_residual_;
  uint64_t step_ = 0;
};

}  // namespace gw
