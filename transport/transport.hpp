// The transport contract (DESIGN.md): two-sided, tagged, asynchronous messages between the
// ranks of one group. A transport moves bytes; it never knows what a codec is.
//
// Operations live in caller-owned Op objects, so posting never allocates. An Op must stay
// where it is, and its buffer valid, until the op is finished (done or failed). Every
// transport keeps its first failure sticky (a dead peer, an abort): from then on every
// pending op fails with it, and every new post returns it.
//
// Threading: one thread posts, progresses and waits; abort() may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gradwire/status.hpp"

namespace gw::transport {

using Clock = std::chrono::steady_clock;

// User tags are 48 bits wide; the transport may use the rest to carry the source rank.
constexpr int kTagBits = 48;
constexpr uint64_t kTagMask = (uint64_t{1} << kTagBits) - 1;
constexpr int kMaxRanks = 1 << 16;

enum class OpState : int { kIdle = 0, kPending = 1, kDone = 2, kFailed = 3 };

struct Op {
  std::atomic<int> state{static_cast<int>(OpState::kIdle)};
  Status status;     // why it failed, when state is kFailed
  size_t bytes = 0;  // bytes received (receives) or sent (sends)
  int peer = -1;
  bool is_recv = false;
  void* impl = nullptr;  // the transport's request handle
  // Room a transport may use while a send is pending (UCX: isend_with_head's gather list,
  // which must outlive the post).
  alignas(void*) unsigned char gather[4 * sizeof(void*)] = {};
  Op* prev = nullptr;  // the transport's list of pending ops
  Op* next = nullptr;

  Op() = default;
  Op(const Op&) = delete;
  Op& operator=(const Op&) = delete;

  OpState current() const { return static_cast<OpState>(state.load(std::memory_order_acquire)); }
  bool finished() const {
    const OpState s = current();
    return s == OpState::kDone || s == OpState::kFailed;
  }
};

// Whether s is an irecv's "message truncated" failure (a message longer than the receive's
// capacity; the link itself is fine): callers that expect exact sizes report it as such.
inline bool is_truncation(const Status& s) {
  return s.code() == Code::kRemote && s.message().rfind("message truncated", 0) == 0;
}

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* name() const = 0;

  // Posts a send of len bytes; the receiver's matching irecv gets exactly these bytes.
  virtual Status isend(int peer, uint64_t tag, const void* buf, size_t len, Op& op) = 0;
  // Posts a send of head (head_len bytes) followed by buf (len bytes) as one message of
  // head_len + len bytes, without copying them together first. Both must stay valid until
  // the op is finished.
  virtual Status isend_with_head(int peer, uint64_t tag, const void* head, size_t head_len, const void* buf, size_t len,
                                 Op& op) = 0;
  // Posts a receive of at most cap bytes from peer with tag. A longer message fails the op
  // (kRemote, "message truncated") rather than overrunning buf.
  virtual Status irecv(int peer, uint64_t tag, void* buf, size_t cap, Op& op) = 0;
  // Posts a receive of a message of any length from peer with tag: its first cap bytes land
  // in buf, the rest is dropped, and op.bytes is the whole message's length. For a message
  // whose head says what the rest is (a call descriptor, which may arrive with data behind
  // it from a peer making another call): it is read and judged, never truncated.
  virtual Status irecv_head(int peer, uint64_t tag, void* buf, size_t cap, Op& op) = 0;
  // Advances outstanding operations; returns true if anything happened.
  virtual bool progress() = 0;
  // Whether sends posted here have not finished yet (bytes still on their way): what the
  // communicator's statistics count as compute overlapped with transfer.
  virtual bool sends_in_flight() const { return false; }
  // Blocks (without spinning a core for long) until something may have happened or
  // the deadline passes.
  virtual void wait_for_events(Clock::time_point deadline) = 0;

  // Fails every pending and future operation with reason. Safe from any thread.
  virtual void abort(const Status& reason) = 0;
  // The sticky first failure, or OK.
  virtual Status error() const = 0;

  // Recovery (gw_comm_shrink). A transport lives in epochs: a failure ends the current one for
  // good, and recover() starts the next among the ranks still alive, on the same connections'
  // machinery (no new rendezvous). Messages of one epoch never match receives of another.
  // Transports that cannot recover stay in epoch 0 and refuse recover() with kUnsupported.
  virtual uint32_t epoch() const { return 0; }
  // abort(reason) if the transport is still in `epoch`: the communicator of an ended epoch
  // must not fail the one that recovered from it. Safe from any thread.
  virtual void abort_epoch(uint32_t epoch, const Status& reason) {
    if (epoch == this->epoch()) abort(reason);
  }
  // The first failure of `epoch` (OK if it has none).
  virtual Status epoch_error(uint32_t epoch) const {
    return epoch == this->epoch() ? error() : Status(Code::kAborted, "epoch " + std::to_string(epoch) + " ended");
  }
  // After the current epoch failed: agrees with the other survivors on who is alive (every
  // survivor calls it; a rank that stays silent for suspect_after is counted out), then opens
  // the next epoch among them. Returns the members, sorted, this rank included. Errors: the
  // agreement excluded this rank, a member died before the new epoch was up, the deadline.
  virtual Result<std::vector<int>> recover(Clock::duration suspect_after, Clock::time_point deadline) {
    (void)suspect_after;
    (void)deadline;
    return Status(Code::kUnsupported, std::string("the ") + name() + " transport cannot recover from a failure");
  }

  // Pins memory that will be sent or received often (a registration cache: repeated calls
  // with the same range are free). Transports that need no pinning return OK.
  virtual Status register_memory(const void* buf, size_t len) {
    (void)buf;
    (void)len;
    return Status::ok();
  }

  // Waits for op until it finishes or the deadline passes; interrupt, when given, is asked
  // between rounds and ends the wait with its error. On timeout (or interrupt) the op is
  // still pending and the caller must abort the transport before the buffer goes away.
  Status wait(Op& op, Clock::time_point deadline, const std::function<Status()>& interrupt = nullptr);
  // Waits for all of ops[0..n); returns the first failure.
  Status wait_all(Op* ops, size_t n, Clock::time_point deadline);
};

// A transport that hands every call to another one; layers derive from it and override only
// what they add (counting what is sent, serving other work while a collective progresses).
// Ops posted through it live in the inner transport's lists, so aborting that one fails them.
class ForwardingTransport : public Transport {
 public:
  explicit ForwardingTransport(Transport& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const char* name() const override { return inner_.name(); }
  Status isend(int peer, uint64_t tag, const void* buf, size_t len, Op& op) override {
    return inner_.isend(peer, tag, buf, len, op);
  }
  Status isend_with_head(int peer, uint64_t tag, const void* head, size_t head_len, const void* buf, size_t len,
                         Op& op) override {
    return inner_.isend_with_head(peer, tag, head, head_len, buf, len, op);
  }
  Status irecv(int peer, uint64_t tag, void* buf, size_t cap, Op& op) override {
    return inner_.irecv(peer, tag, buf, cap, op);
  }
  Status irecv_head(int peer, uint64_t tag, void* buf, size_t cap, Op& op) override {
    return inner_.irecv_head(peer, tag, buf, cap, op);
  }
  bool progress() override { return inner_.progress(); }
  bool sends_in_flight() const override { return inner_.sends_in_flight(); }
  void wait_for_events(Clock::time_point deadline) override { inner_.wait_for_events(deadline); }
  void abort(const Status& reason) override { inner_.abort(reason); }
  Status error() const override { return inner_.error(); }
  uint32_t epoch() const override { return inner_.epoch(); }
  void abort_epoch(uint32_t epoch, const Status& reason) override { inner_.abort_epoch(epoch, reason); }
  Status epoch_error(uint32_t epoch) const override { return inner_.epoch_error(epoch); }
  Result<std::vector<int>> recover(Clock::duration suspect_after, Clock::time_point deadline) override {
    return inner_.recover(suspect_after, deadline);
  }
  Status register_memory(const void* buf, size_t len) override { return inner_.register_memory(buf, len); }

 protected:
  Transport& inner_;
};

}  // namespace gw::transport
