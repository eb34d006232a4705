// The check that every rank made the same call (call_descriptor.hpp): each call sends this
// rank's descriptor to every other rank and receives theirs, beside the call's own messages.
// Nothing waits for the exchange up front; instead data received from a peer is used only
// once that peer's descriptor has matched (Context::wait), and a call returns success only
// once every peer's has. A mismatch therefore fails the call on every rank, before any
// mismatched byte is reduced or returned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/checks/call_descriptor.hpp"
#include "gradwire/status.hpp"
#include "transport/transport.hpp"

namespace gw::coll {

class CallCheck {
 public:
  // The tag of descriptor messages: a step no algorithm uses, sequence bits zero. Every call
  // takes exactly one descriptor from each peer, so they match in call order, and a peer that
  // is a call ahead or behind shows as a different call number.
  static uint64_t tag();

  // Posts a receive for every other rank's descriptor; mine goes out at the call's first
  // wait (poll, require or finish), behind the call's first data messages, so that a peer
  // woken by the data finds the descriptor in the same wake-up.
  Status start(transport::Transport& tp, const CallDescriptor& mine);
  // Judges the descriptors that have arrived; the first mismatch is returned (and kept).
  Status poll();
  // Waits (until deadline) for peer's descriptor and judges it. kTimeout if it has not come.
  Status require(int peer, transport::Clock::time_point deadline);
  // require() for every peer: waits until every peer's descriptor has arrived and matched.
  Status require_all(transport::Clock::time_point deadline);
  // require_all(), then waits for this rank's sends.
  Status finish(transport::Clock::time_point deadline);
  // For a timeout's message: the ranks that have not started this call (their descriptor
  // has not arrived), e.g. "; rank 2 has not started this call (#7 allreduce)"; "" if none.
  std::string not_started() const;
  // Whether a call is being checked (start ran, finish has not).
  bool active() const { return active_; }

 private:
  Status judge(int peer);
  Status send();

  transport::Transport* tp_ = nullptr;
  bool active_ = false;
  bool unsent_ = false;  // this rank's descriptor is still to be sent
  int rank_ = 0;
  int size_ = 0;
  int unjudged_ = 0;
  Status failure_;
  CallDescriptor mine_;
  uint8_t mine_bytes_[CallDescriptor::kMaxBytes];
  size_t mine_len_ = 0;
  std::vector<uint8_t> judged_;
  std::vector<uint8_t> inbox_;  // size * kMaxBytes
  std::unique_ptr<transport::Op[]> sends_, recvs_;
  size_t ops_ = 0;
};

}  // namespace gw::coll
