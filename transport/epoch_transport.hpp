// A communicator's view of a shared transport: one epoch of it, over some of its ranks.
// The first communicator sees every rank in the epoch the transport had when it was made; a
// shrunk one sees the survivors in the epoch recover() opened for them, numbered 0..m-1 in
// global rank order. Once the transport has moved on to a later epoch, the view refuses every
// post with its own epoch's failure, and its abort() no longer reaches the transport.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "transport/transport.hpp"

namespace gw::transport {

class EpochTransport final : public Transport {
 public:
  // members: the global ranks of this view, sorted, containing core's rank (empty: all).
  EpochTransport(std::shared_ptr<Transport> core, uint32_t epoch, std::vector<int> members);

  const std::shared_ptr<Transport>& core() const { return core_; }
  const std::vector<int>& members() const { return members_; }
  // The global rank of this view's rank r.
  int global(int r) const { return members_.empty() ? r : members_[static_cast<size_t>(r)]; }
  // This view's rank of global rank g, or -1 when g is not one of its members.
  int local(int g) const;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return core_->name(); }
  Status isend(int peer, uint64_t tag, const void* buf, size_t len, Op& op) override;
  Status isend_with_head(int peer, uint64_t tag, const void* head, size_t head_len, const void* buf, size_t len,
                         Op& op) override;
  Status irecv(int peer, uint64_t tag, void* buf, size_t cap, Op& op) override;
  Status irecv_head(int peer, uint64_t tag, void* buf, size_t cap, Op& op) override;
  bool progress() override { return core_->progress(); }
  bool sends_in_flight() const override { return core_->sends_in_flight(); }
  void wait_for_events(Clock::time_point deadline) override { core_->wait_for_events(deadline); }
  void abort(const Status& reason) override { core_->abort_epoch(epoch_, reason); }
  Status error() const override { return core_->epoch_error(epoch_); }
  Status register_memory(const void* buf, size_t len) override { return core_->register_memory(buf, len); }
  uint32_t epoch() const override { return epoch_; }
  void abort_epoch(uint32_t epoch, const Status& reason) override { core_->abort_epoch(epoch, reason); }
  Status epoch_error(uint32_t epoch) const override { return core_->epoch_error(epoch); }
  // Recovers the shared transport (only while it is still in this view's epoch); the members
  // returned are global ranks.
  Result<std::vector<int>> recover(Clock::duration suspect_after, Clock::time_point deadline) override;

 private:
  // Checks peer and the epoch; on success, sets *global_peer.
  Status route(int peer, int* global_peer) const;
  // After a post: ops name the peer by this view's numbering.
  Status posted(Status s, int peer, Op& op) const;

  std::shared_ptr<Transport> core_;
  uint32_t epoch_;
  std::vector<int> members_;
  int rank_ = 0;
  int size_ = 0;
  bool failed_recovery_ = false;  // recover() from here opened failed_epoch_ and failed in it
  uint32_t failed_epoch_ = 0;
};

}  // namespace gw::transport
