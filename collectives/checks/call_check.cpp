#include "collectives/checks/call_check.hpp"

#include <cstring>
#include <string>

#include "collectives/common/context.hpp"
#include "collectives/common/step_ranges.hpp"

namespace gw::coll {

uint64_t CallCheck::tag() { return static_cast<uint64_t>(kCallCheckSteps.base) << kChunkBits; }

Status CallCheck::start(transport::Transport& tp, const CallDescriptor& mine) {
  tp_ = &tp;
  rank_ = tp.rank();
  size_ = tp.size();
  failure_ = Status::ok();
  mine_ = mine;
  mine_len_ = encode_descriptor(mine, mine_bytes_);
  const size_t p = static_cast<size_t>(size_);
  if (ops_ < p) {
    sends_.reset(new transport::Op[p]);
    recvs_.reset(new transport::Op[p]);
    inbox_.assign(p * CallDescriptor::kMaxBytes, 0);
    ops_ = p;
  }
  judged_.assign(p, 0);
  judged_[static_cast<size_t>(rank_)] = 1;
  unjudged_ = size_ - 1;
  active_ = true;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const size_t i = static_cast<size_t>(r);
    GW_RETURN_IF_ERROR(
        tp.irecv(r, tag(), inbox_.data() + i * CallDescriptor::kMaxBytes, CallDescriptor::kMaxBytes, recvs_[i]));
  }
  unsent_ = true;
  return Status::ok();
}

Status CallCheck::send() {
  unsent_ = false;
  for (int i = 1; i < size_; ++i) {  // starting after this rank spreads the load
    const int r = (rank_ + i) % size_;
    GW_RETURN_IF_ERROR(tp_->isend(r, tag(), mine_bytes_, mine_len_, sends_[static_cast<size_t>(r)]));
  }
  return Status::ok();
}

Status CallCheck::judge(int peer) {
  const size_t i = static_cast<size_t>(peer);
  const transport::Op& op = recvs_[i];
  if (op.current() == transport::OpState::kFailed) return op.status;
  judged_[i] = 1;
  --unjudged_;
  const uint8_t* got = inbox_.data() + i * CallDescriptor::kMaxBytes;
  if (op.bytes == mine_len_ && std::memcmp(got, mine_bytes_, mine_len_) == 0) return Status::ok();
  GW_ASSIGN_OR_RETURN(CallDescriptor theirs, parse_descriptor(got, op.bytes, peer));
  return invalid_usage("mismatched collective calls: " + describe_mismatch(theirs, peer, mine_, rank_));
}

Status CallCheck::poll() {
  if (!active_ || !failure_.is_ok()) return failure_;
  if (unsent_) GW_RETURN_IF_ERROR(send());
  for (int r = 0; r < size_ && unjudged_ > 0; ++r) {
    const size_t i = static_cast<size_t>(r);
    if (judged_[i] != 0 || !recvs_[i].finished()) continue;
    failure_ = judge(r);
    if (!failure_.is_ok()) return failure_;
  }
  return Status::ok();
}

Status CallCheck::require(int peer, transport::Clock::time_point deadline) {
  if (!active_ || !failure_.is_ok()) return failure_;
  if (unsent_) GW_RETURN_IF_ERROR(send());
  const size_t i = static_cast<size_t>(peer);
  if (peer < 0 || peer >= size_ || judged_[i] != 0) return Status::ok();
  const Status waited = tp_->wait(recvs_[i], deadline);
  if (!recvs_[i].finished()) {
    return Status(Code::kTimeout, "rank " + std::to_string(peer) + " did not start collective #" +
                                      std::to_string(mine_.seq) + " (" + call_kind_name(mine_.kind) + ") in time");
  }
  failure_ = waited.is_ok() ? judge(peer) : waited;
  return failure_;
}

std::string CallCheck::not_started() const {
  if (!active_) return "";
  std::string ranks;
  int n = 0;
  for (int r = 0; r < size_; ++r) {
    const size_t i = static_cast<size_t>(r);
    if (judged_[i] != 0 || recvs_[i].finished()) continue;
    ranks += (n++ == 0 ? "" : ", ") + std::to_string(r);
  }
  if (n == 0) return "";
  return std::string("; rank") + (n > 1 ? "s " : " ") + ranks + (n > 1 ? " have" : " has") +
         " not started this call (#" + std::to_string(mine_.seq) + " " + call_kind_name(mine_.kind) +
         "): stopped, stuck, or making fewer calls";
}

Status CallCheck::require_all(transport::Clock::time_point deadline) {
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) GW_RETURN_IF_ERROR(require(r, deadline));
  }
  return failure_;
}

Status CallCheck::finish(transport::Clock::time_point deadline) {
  GW_RETURN_IF_ERROR(require_all(deadline));  // sends this rank's descriptor too, if it is still unsent
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) GW_RETURN_IF_ERROR(tp_->wait(sends_[static_cast<size_t>(r)], deadline));
  }
  active_ = false;
  return Status::ok();
}

}  // namespace gw::coll
