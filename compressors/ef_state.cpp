#include "gradwire/ef_state.hpp"

#include <algorithm>
#include <utility>

namespace gw {

ErrorFeedback::ErrorFeedback(size_t count) : storage_(count, 0.0f), data_(storage_.data()), count_(count) {}

ErrorFeedback::ErrorFeedback(ErrorFeedback& whole, size_t start, size_t count)
    : data_(whole.residual() + start), count_(count), view_(true) {}

ErrorFeedback::ErrorFeedback(const ErrorFeedback& other)
    : storage_(other.storage_),
      data_(other.view_ ? other.data_ : storage_.data()),
      count_(other.count_),
      view_(other.view_),
      owner_residual_(other.owner_residual_),
      step_(other.step_) {}

ErrorFeedback::ErrorFeedback(ErrorFeedback&& other) noexcept
    : storage_(std::move(other.storage_)),
      data_(other.view_ ? other.data_ : storage_.data()),
      count_(other.count_),
      view_(other.view_),
      owner_residual_(std::move(other.owner_residual_)),
      step_(other.step_) {
  other.data_ = nullptr;
  other.count_ = 0;
  other.view_ = false;
}

ErrorFeedback& ErrorFeedback::operator=(const ErrorFeedback& other) {
  if (this != &other) *this = ErrorFeedback(other);
  return *this;
}

ErrorFeedback& ErrorFeedback::operator=(ErrorFeedback&& other) noexcept {
  if (this == &other) return *this;
  storage_ = std::move(other.storage_);
  view_ = other.view_;
  data_ = view_ ? other.data_ : storage_.data();
  count_ = other.count_;
  owner_residual_ = std::move(other.owner_residual_);
  step_ = other.step_;
  other.data_ = nullptr;
  other.count_ = 0;
  other.view_ = false;
  return *this;
}

void ErrorFeedback::reset() {
  std::fill(data_, data_ + count_, 0.0f);
  std::fill(owner_residual_.begin(), owner_residual_.end(), 0.0f);
  step_ = 0;
}

float* ErrorFeedback::owner_residual(size_t count) {
  if (owner_residual_.size() != count) owner_residual_.assign(count, 0.0f);
  return owner_residual_.data();
}

}  // namespace gw
