#include "transport/epoch_transport.hpp"

#include <algorithm>
#include <string>

namespace gw::transport {

EpochTransport::EpochTransport(std::shared_ptr<Transport> core, uint32_t epoch, std::vector<int> members)
    : core_(std::move(core)), epoch_(epoch), members_(std::move(members)) {
  if (members_.empty()) {
    rank_ = core_->rank();
    size_ = core_->size();
  } else {
    const auto it = std::lower_bound(members_.begin(), members_.end(), core_->rank());
    rank_ = static_cast<int>(it - members_.begin());
    size_ = static_cast<int>(members_.size());
  }
}

int EpochTransport::local(int g) const {
  if (members_.empty()) return g >= 0 && g < size_ ? g : -1;
  const auto it = std::lower_bound(members_.begin(), members_.end(), g);
  return it != members_.end() && *it == g ? static_cast<int>(it - members_.begin()) : -1;
}

Status EpochTransport::route(int peer, int* global_peer) const {
  if (peer < 0 || peer >= size_) {
    return invalid_argument("peer rank " + std::to_string(peer) + " is not in [0, " + std::to_string(size_) + ")");
  }
  if (core_->epoch() != epoch_) return core_->epoch_error(epoch_);
  *global_peer = global(peer);
  return Status::ok();
}

Status EpochTransport::posted(Status s, int peer, Op& op) const {
  op.peer = peer;
  return s;
}

Status EpochTransport::isend(int peer, uint64_t tag, const void* buf, size_t len, Op& op) {
  int g = 0;
  GW_RETURN_IF_ERROR(route(peer, &g));
  return posted(core_->isend(g, tag, buf, len, op), peer, op);
}

Status EpochTransport::isend_with_head(int peer, uint64_t tag, const void* head, size_t head_len, const void* buf,
                                       size_t len, Op& op) {
  int g = 0;
  GW_RETURN_IF_ERROR(route(peer, &g));
  return posted(core_->isend_with_head(g, tag, head, head_len, buf, len, op), peer, op);
}

Status EpochTransport::irecv(int peer, uint64_t tag, void* buf, size_t cap, Op& op) {
  int g = 0;
  GW_RETURN_IF_ERROR(route(peer, &g));
  return posted(core_->irecv(g, tag, buf, cap, op), peer, op);
}

Status EpochTransport::irecv_head(int peer, uint64_t tag, void* buf, size_t cap, Op& op) {
  int g = 0;
  GW_RETURN_IF_ERROR(route(peer, &g));
  return posted(core_->irecv_head(g, tag, buf, cap, op), peer, op);
}

Result<std::vector<int>> EpochTransport::recover(Clock::duration suspect_after, Clock::time_point deadline) {
  const uint32_t now = core_->epoch();
  // A recovery that failed left the transport in an epoch nobody uses: this view may try again.
  if (now != epoch_ && !(failed_recovery_ && now == failed_epoch_)) {
    return Status(Code::kInvalidUsage, "this communicator's transport has already recovered into epoch " +
                                           std::to_string(now) + " (a communicator is shrunk once)");
  }
  Result<std::vector<int>> r = core_->recover(suspect_after, deadline);
  failed_recovery_ = !r.is_ok() && core_->epoch() != now;
  failed_epoch_ = core_->epoch();
  return r;
}

}  // namespace gw::transport
