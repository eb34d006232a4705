#include "gradwire/ef_state.hpp"

#include <algorithm>

namespace gw {

ErrorFeedback::ErrorFeedback(size_t count) : residual_(count, 0.0f) {}

void ErrorFeedback::reset() {
  std::fill(residual_.begin(), residual_.end(), 0.0f);
  std::fill(owner_residual_.begin(), owner_residual_.end(), 0.0f);
  step_ = 0;
}

float* ErrorFeedback::owner_residual(size_t count) {
  if (owner_residual_.size() != count) owner_residual_.assign(count, 0.0f);
  return owner_residual_.data();
}

}  // namespace gw
