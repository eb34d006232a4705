#include "transport/local/local_transport.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>

namespace gw::transport {

namespace {

struct Posted {
  Op* op;
  uint64_t tag;
  const void* send_buf;
  void* recv_buf;
  size_t len;                  // send length (head included) or receive capacity
  const void* head = nullptr;  // a send's first head_len bytes (isend_with_head)
  size_t head_len = 0;
  bool any_length = false;  // a receive that keeps the first len bytes of any message (irecv_head)
};

}  // namespace

// One mutex guards every queue; tests are not about the fabric's speed.
class LocalFabric {
 public:
  explicit LocalFabric(int size)
      : size_(size), sends_(static_cast<size_t>(size * size)), recvs_(static_cast<size_t>(size * size)) {}

  Status post(int src, int dst, bool is_recv, const Posted& p) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!error_.is_ok()) return error_;
    auto& mine = is_recv ? recvs_[index(src, dst)] : sends_[index(src, dst)];
    auto& theirs = is_recv ? sends_[index(src, dst)] : recvs_[index(src, dst)];
    for (auto it = theirs.begin(); it != theirs.end(); ++it) {
      if (it->tag != p.tag) continue;
      const Posted send = is_recv ? *it : p;
      const Posted recv = is_recv ? p : *it;
      theirs.erase(it);
      complete(send, recv);
      cv_.notify_all();
      return Status::ok();
    }
    mine.push_back(p);
    return Status::ok();
  }

  void fail_all(const Status& reason) {
    std::unique_lock<std::mutex> lock(mu_);
    if (error_.is_ok()) error_ = reason;
    for (auto* queues : {&sends_, &recvs_}) {
      for (auto& q : *queues) {
        for (Posted& p : q) finish(*p.op, error_);
        q.clear();
      }
    }
    cv_.notify_all();
  }

  Status error() {
    std::unique_lock<std::mutex> lock(mu_);
    return error_;
  }

  // A lone rank's recovery: the failure (and everything it failed) is behind it.
  void reopen() {
    std::unique_lock<std::mutex> lock(mu_);
    error_ = Status::ok();
  }

  void wait_for_events(Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(5)));
  }

  int size() const { return size_; }

 private:
  size_t index(int src, int dst) const { return static_cast<size_t>(src * size_ + dst); }

  static void finish(Op& op, const Status& s) {
    op.status = s;
    op.state.store(static_cast<int>(s.is_ok() ? OpState::kDone : OpState::kFailed), std::memory_order_release);
  }

  static void complete(const Posted& send, const Posted& recv) {
    if (send.len > recv.len && !recv.any_length) {
      const Status s(Code::kRemote, "message truncated: " + std::to_string(send.len) +
                                        " bytes sent, receive buffer holds " + std::to_string(recv.len));
      finish(*send.op, s);
      finish(*recv.op, s);
      return;
    }
    auto* to = static_cast<unsigned char*>(recv.recv_buf);
    const size_t keep = std::min(send.len, recv.len);
    const size_t from_head = std::min(keep, send.head_len);
    if (from_head > 0) std::memcpy(to, send.head, from_head);
    if (keep > from_head) std::memcpy(to + from_head, send.send_buf, keep - from_head);
    send.op->bytes = send.len;
    recv.op->bytes = send.len;
    finish(*send.op, Status::ok());
    finish(*recv.op, Status::ok());
  }

  std::mutex mu_;
  std::condition_variable cv_;
  int size_;
  Status error_;
  std::vector<std::deque<Posted>> sends_;  // by (src, dst)
  std::vector<std::deque<Posted>> recvs_;
};

namespace {

class LocalTransport final : public Transport {
 public:
  LocalTransport(std::shared_ptr<LocalFabric> fabric, int rank) : fabric_(std::move(fabric)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return fabric_->size(); }
  const char* name() const override { return "local"; }

  Status isend(int peer, uint64_t tag, const void* buf, size_t len, Op& op) override {
    GW_RETURN_IF_ERROR(prepare(peer, op, false));
    return fabric_->post(rank_, peer, false, Posted{&op, tag & kTagMask, buf, nullptr, len});
  }
  Status isend_with_head(int peer, uint64_t tag, const void* head, size_t head_len, const void* buf, size_t len,
                         Op& op) override {
    GW_RETURN_IF_ERROR(prepare(peer, op, false));
    return fabric_->post(rank_, peer, false, Posted{&op, tag & kTagMask, buf, nullptr, head_len + len, head, head_len});
  }
  Status irecv(int peer, uint64_t tag, void* buf, size_t cap, Op& op) override {
    GW_RETURN_IF_ERROR(prepare(peer, op, true));
    return fabric_->post(peer, rank_, true, Posted{&op, tag & kTagMask, nullptr, buf, cap});
  }
  Status irecv_head(int peer, uint64_t tag, void* buf, size_t cap, Op& op) override {
    GW_RETURN_IF_ERROR(prepare(peer, op, true));
    Posted p{&op, tag & kTagMask, nullptr, buf, cap};
    p.any_length = true;
    return fabric_->post(peer, rank_, true, p);
  }
  bool progress() override { return false; }
  void wait_for_events(Clock::time_point deadline) override { fabric_->wait_for_events(deadline); }
  void abort(const Status& reason) override { fabric_->fail_all(reason); }
  Status error() const override { return fabric_->error(); }

  // Epochs for a group of one (a shrink of a lone rank): in-process groups of more ranks are
  // test fixtures and do not recover.
  uint32_t epoch() const override { return epoch_.load(std::memory_order_acquire); }
  Status epoch_error(uint32_t epoch) const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (epoch == epoch_.load(std::memory_order_relaxed)) return fabric_->error();
    if (epoch < ended_.size()) return ended_[epoch];
    return internal_error("local transport: no epoch " + std::to_string(epoch) + " yet");
  }
  void abort_epoch(uint32_t epoch, const Status& reason) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (epoch == epoch_.load(std::memory_order_relaxed)) fabric_->fail_all(reason);
  }
  Result<std::vector<int>> recover(Clock::duration, Clock::time_point) override {
    if (size() != 1) return unsupported("the local transport recovers only a group of one rank");
    std::lock_guard<std::mutex> lock(mu_);
    const Status failed = fabric_->error();
    if (failed.is_ok()) return invalid_usage("local transport: recover() while the group is healthy");
    ended_.push_back(failed);
    fabric_->reopen();
    epoch_.fetch_add(1, std::memory_order_acq_rel);
    return std::vector<int>{0};
  }

 private:
  Status prepare(int peer, Op& op, bool is_recv) {
    if (peer < 0 || peer >= size()) return invalid_argument("peer rank " + std::to_string(peer) + " is out of range");
    op.peer = peer;
    op.is_recv = is_recv;
    op.bytes = 0;
    op.status = Status::ok();
    op.state.store(static_cast<int>(OpState::kPending), std::memory_order_release);
    return Status::ok();
  }

  std::shared_ptr<LocalFabric> fabric_;
  int rank_;
  mutable std::mutex mu_;  // epochs
  std::atomic<uint32_t> epoch_{0};
  std::vector<Status> ended_;  // [e]: why epoch e ended
};

}  // namespace

std::vector<std::unique_ptr<Transport>> make_local_group(int size) {
  auto fabric = std::make_shared<LocalFabric>(size);
  std::vector<std::unique_ptr<Transport>> out;
  for (int r = 0; r < size; ++r) out.push_back(std::make_unique<LocalTransport>(fabric, r));
  return out;
}

}  // namespace gw::transport
