// The check that every rank made the same call (call_descriptor.hpp): each call sends this
// rank's descriptor to the peers its check graph names (check_graph.hpp) and receives
// theirs, beside the call's own messages or at the head of them. Nothing waits for the
// exchange up front; instead data received from a peer is used only once that peer's
// descriptor has matched (Context::wait, or Context::take_carried for a descriptor carried
// in the data), and a call returns success only once every descriptor it expects has. A
// mismatch therefore fails the call before any mismatched byte is reduced or returned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/checks/call_descriptor.hpp"
#include "collectives/checks/check_graph.hpp"
#include "gradwire/status.hpp"
#include "transport/transport.hpp"

namespace gw::coll {

class CallCheck {
 public:
  // The tag of call seq's descriptor messages: a step no algorithm uses. A peer that is a
  // call ahead or behind sends its own call seq, which shows as a different call.
  static uint64_t tag(uint64_t seq);

  // Posts a receive for the descriptor of every peer of graph that sends one of its own;
  // mine goes out at the call's first wait (poll, require or finish), behind the call's
  // first data messages, so that a peer woken by the data finds the descriptor in the same
  // wake-up.
  Status start(transport::Transport& tp, const CallDescriptor& mine, CheckGraph graph = CheckGraph::kAllPeers);
  // Judges the descriptors that have arrived; the first mismatch is returned (and kept).
  Status poll();
  // Waits (until deadline) for peer's descriptor and judges it. kTimeout if it has not come.
  // A peer whose descriptor is carried in its data is the algorithm's to judge (carried):
  // OK here. A peer the graph does not name is an internal error (data from an unchecked
  // edge).
  Status require(int peer, transport::Clock::time_point deadline);
  // Waits until every descriptor sent on its own has arrived and matched.
  Status require_all(transport::Clock::time_point deadline);
  // require_all(), that every carried descriptor was judged, then waits for this rank's sends.
  Status finish(transport::Clock::time_point deadline);
  // For a timeout's message: the ranks that have not started this call (their descriptor
  // has not arrived), e.g. "; rank 2 has not started this call (#7 allreduce)"; "" if none.
  std::string not_started() const;
  // Whether a call is being checked (start ran, finish has not).
  bool active() const { return active_; }

  // Descriptors carried in data (graph kDoubling): this rank's bytes, to put at the head of
  // every message to a partner, and the judgement of one at the head of a message from peer
  // (len bytes in all; *header: the descriptor's length, where the data begins). Under any
  // other graph nothing is carried (length 0, take_carried takes nothing): an algorithm that
  // carries, run inside another call (the hierarchical all-reduce's inter-node leg), has its
  // data checked by that call's own descriptor messages instead (Context::wait).
  const uint8_t* carried_bytes() const { return carries_ ? mine_bytes_ : nullptr; }
  size_t carried_len() const { return carries_ ? mine_len_ : 0; }
  Status take_carried(int peer, const uint8_t* msg, size_t len, size_t* header);

  // The ring edge riding at the head of the algorithm's first data messages (graph
  // kRingHead): true until the call's first message to r + 1 has been sent with
  // send_ring_head. An algorithm run twice in a call (or run inside another call, whose
  // graph is not kRingHead) finds it false and sends plain messages.
  bool ring_head_pending() const { return head_unsent_; }
  // The room an algorithm keeps ahead of and behind recv_ring_head's data.
  static constexpr size_t kHeadRoom = CallDescriptor::kMaxBytes;
  // Sends [this rank's descriptor | buf] to r + 1 on the check's tag through tp (the
  // algorithm's transport, which counts what it sends), as op.
  Status send_ring_head(transport::Transport& tp, const void* buf, size_t len, transport::Op& op);
  // Posts the receive of r - 1's first message: its descriptor lands just ahead of data,
  // its data at data (len bytes expected; kHeadRoom bytes ahead of data and behind its len
  // bytes must be writable, so that a longer message of a mismatched call is still read and
  // named). Returns the op to wait
  // on with Context::wait; once that returns OK the descriptor has matched and op.bytes
  // counts the data alone.
  Result<transport::Op*> recv_ring_head(transport::Transport& tp, void* data, size_t len);

 private:
  // kHead: r - 1's descriptor heads its first data message, received by the algorithm.
  enum Edge : uint8_t { kNone = 0, kOwnMessage = 1, kCarried = 2, kHead = 3 };
  Status judge(int peer);
  Status judge_head(int peer, const uint8_t* got, size_t len, size_t* have);
  Status longer_than_expected(int peer) const;
  Status judge_bytes(int peer, const uint8_t* got, size_t len);
  Status send();
  void add_in(int peer, Edge how);
  void add_out(int peer);

  transport::Transport* tp_ = nullptr;
  bool active_ = false;
  bool carries_ = false;        // the graph is kDoubling: partners' descriptors ride in their data
  bool unsent_ = false;         // this rank's descriptors are still to be sent
  bool head_unsent_ = false;    // kRingHead: this rank's descriptor is still to ride to r + 1
  uint8_t* head_at_ = nullptr;  // kRingHead: where r - 1's descriptor lands (null: not posted)
  size_t head_room_ = 0;        // kRingHead: the capacity of that receive
  int rank_ = 0;
  int size_ = 0;
  int unjudged_ = 0;  // of ins_
  Status failure_;
  CallDescriptor mine_;
  uint8_t mine_bytes_[CallDescriptor::kMaxBytes];
  size_t mine_len_ = 0;
  std::vector<uint8_t> in_;      // per peer: how its descriptor comes (Edge)
  std::vector<uint8_t> judged_;  // per peer
  std::vector<uint8_t> out_;     // per peer: this rank sends it a descriptor message
  std::vector<int> ins_, outs_;  // the peers of in_ and out_, in order
  std::vector<uint8_t> inbox_;   // size * kMaxBytes
  std::unique_ptr<transport::Op[]> sends_, recvs_;
  size_t ops_ = 0;
};

}  // namespace gw::coll
