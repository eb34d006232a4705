// A group of the communicator's ranks seen as a transport of its own: rank i of the group is
// members[i] of the whole. Algorithms written for a whole communicator run on a node's ranks
// or on one rank per node unchanged. Ops still report the peer's global rank (the call check
// keys descriptors by it).
#pragma once

#include <utility>
#include <vector>

#include "collectives/common/context.hpp"
#include "transport/transport.hpp"

namespace gw::coll {

class SubgroupTransport final : public transport::ForwardingTransport {
 public:
  SubgroupTransport(transport::Transport& whole, std::vector<int> members, int my_index)
      : ForwardingTransport(whole), members_(std::move(members)), me_(my_index) {}
  int rank() const override { return me_; }
  int size() const override { return static_cast<int>(members_.size()); }
  Status isend(int peer, uint64_t tag, const void* buf, size_t len, transport::Op& op) override {
    return inner_.isend(members_[static_cast<size_t>(peer)], tag, buf, len, op);
  }
  Status isend_with_head(int peer, uint64_t tag, const void* head, size_t head_len, const void* buf, size_t len,
                         transport::Op& op) override {
    return inner_.isend_with_head(members_[static_cast<size_t>(peer)], tag, head, head_len, buf, len, op);
  }
  Status irecv(int peer, uint64_t tag, void* buf, size_t cap, transport::Op& op) override {
    return inner_.irecv(members_[static_cast<size_t>(peer)], tag, buf, cap, op);
  }
  Status irecv_head(int peer, uint64_t tag, void* buf, size_t cap, transport::Op& op) override {
    return inner_.irecv_head(members_[static_cast<size_t>(peer)], tag, buf, cap, op);
  }

 private:
  std::vector<int> members_;
  int me_;
};

// c's call (deadline, sequence, scratch, statistics, call check) on a group of its ranks, in
// the group's own step range.
inline Context in_group(const Context& c, transport::Transport& group, int rank, int size, uint32_t step_base) {
  Context x{group, rank, size, c.deadline, c.seq, c.chunk_bytes, c.scratch};
  x.step_base = step_base;
  x.stats = c.stats;
  x.check = c.check;
  return x;
}

}  // namespace gw::coll
