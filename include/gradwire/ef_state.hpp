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

  size_t count() const { return residual_.size(); }
  uint64_t step() const { return step_; }
  void advance() { ++step_; }
  void set_step(uint64_t step) { step_ = step; }
  void reset();

  float* residual() { return residual_.data(); }
  const float* residual() const { return residual_.data(); }

  // Owner-side residual, sized on first use by the collective that needs it.
  float* owner_residual(size_t count);
  size_t owner_count() const { return owner_residual_.size(); }
  const float* owner_residual() const { return owner_residual_.data(); }

 private:
  std::vector<float> residual_;
  std::vector<float> owner_residual_;
  uint64_t step_ = 0;
};

}  // namespace gw
