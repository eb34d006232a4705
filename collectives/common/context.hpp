// What every collective algorithm is handed: the transport, who we are, the deadline, the
// tag space of this call, and scratch memory the communicator keeps between calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "collectives/observability/stats.hpp"
#include "compressors/workspace.hpp"
#include "gradwire/status.hpp"
#include "transport/transport.hpp"

namespace gw::coll {

class CallCheck;

// Tag layout (48 bits): p2p flag (1 bit, 0 here) | collective sequence number (19 bits) |
// step (12) | chunk (16). Point-to-point messages set the top bit (kP2pTagBit) and carry the
// user's 32-bit tag, so they never match a collective's message.
constexpr int kChunkBits = 16;
constexpr int kStepBits = 12;
constexpr int kSeqBits = 19;
constexpr uint64_t kP2pTagBit = uint64_t{1} << (transport::kTagBits - 1);
static_assert(kSeqBits + kStepBits + kChunkBits == transport::kTagBits - 1, "collective tags must leave the p2p bit");
inline uint64_t p2p_tag(uint32_t user_tag) { return kP2pTagBit | user_tag; }
constexpr uint32_t kMaxChunks = 1u << kChunkBits;
constexpr uint32_t kMaxSteps = 1u << kStepBits;

// Ops that grow to the largest count a call needs and are reused.
class OpArena {
 public:
  transport::Op* get(size_t count);

 private:
  std::unique_ptr<transport::Op[]> ops_;
  size_t count_ = 0;
};

struct Scratch {
  Workspace bytes;  // slots: 0, 1 receive/temporary buffers; 2, 3 encode buffers
  OpArena sends;
  OpArena recvs;
};

struct Context {
  transport::Transport& tp;
  int rank;
  int size;
  transport::Clock::time_point deadline;
  uint64_t seq;
  size_t chunk_bytes;
  Scratch& scratch;
  uint32_t step_base = 0;      // lets one algorithm call another in a separate tag range
  CommStats* stats = nullptr;  // the communicator's counters (encode and decode time)
  CallCheck* check = nullptr;  // the peers' call descriptors (call_check.hpp); null: unchecked
  uint32_t piece = 0;          // > 0: piece `piece` of a call cut into pieces (< 128)

  // The step keying a lossy algorithm's random streams (base: the EF state's step, or the
  // call's sequence number): the pieces of one call draw different random words.
  uint64_t stream_step(uint64_t base) const { return piece == 0 ? base : (base << 7) | piece; }

  // Steps past the field wrap modulo kMaxSteps - 1, so they never reach the call check's step
  // (kMaxSteps - 1, step_ranges.hpp). A ring takes 2 (p - 1) steps, more than the field holds
  // past 2048 ranks; a step and the one kMaxSteps - 1 later come from the same peer, which
  // keeps at most two steps in flight, so a wrapped tag never meets its twin.
  uint64_t tag(uint32_t step, uint32_t chunk) const {
    return ((seq & ((uint64_t{1} << kSeqBits) - 1)) << (kStepBits + kChunkBits)) |
           (static_cast<uint64_t>((step + step_base) % (kMaxSteps - 1)) << kChunkBits) | chunk;
  }
  int next() const { return (rank + 1) % size; }
  int prev() const { return (rank + size - 1) % size; }
  int wrap(int j) const { return ((j % size) + size) % size; }
  // Waits for op until the deadline. A receive is complete only once its peer's call
  // descriptor has matched this rank's: no byte of a mismatched call is used. While waiting,
  // any peer's mismatch ends the wait at once (a peer making another call may never send).
  Status wait(transport::Op& op) const;
  Status wait_all(transport::Op* ops, size_t n) const;
  // For loops that poll: false while op is pending (a mismatch found meanwhile is an error);
  // once it has finished, what wait() says.
  Result<bool> ready(transport::Op& op) const {
    if (!op.finished()) {
      GW_RETURN_IF_ERROR(check_calls());
      return false;
    }
    GW_RETURN_IF_ERROR(wait(op));
    return true;
  }
  // For loops that poll, when a round made no progress: sleeps in the transport until
  // something may have happened or `until` (at most the deadline); kTimeout naming
  // waiting_for (and the ranks that never started the call) once the deadline has passed.
  Status idle(const char* waiting_for, transport::Clock::time_point until) const;
  // A mismatch found so far among the peers' descriptors, else OK.
  Status check_calls() const;
  // Waits until every peer's descriptor has arrived and matched (for work that bypasses
  // wait(), such as NCCL calls).
  Status verify_all_calls() const;
  // Descriptors carried at the head of data messages (check graph kDoubling): this rank's,
  // to put ahead of every message's data (none when the call is unchecked), and the
  // judgement of the one at the head of a message of len bytes from peer, whose data then
  // begins at *header. A mismatch is kInvalidUsage naming both calls.
  size_t carried_len() const;
  const uint8_t* carried_bytes() const;
  Status take_carried(int peer, const uint8_t* msg, size_t len, size_t* header) const;
  // Whether this call's first message to r + 1 is still to carry the descriptor at its head
  // (check graph kRingHead; CallCheck::send_ring_head and recv_ring_head).
  bool ring_head_pending() const;
};

// Balanced split of n elements into parts: part j is [start(j), start(j + 1)).
struct Partition {
  uint64_t n;
  uint64_t parts;
  uint64_t start(uint64_t j) const {
    const uint64_t q = n / parts, r = n % parts;
    return j * q + (j < r ? j : r);
  }
  uint64_t length(uint64_t j) const { return start(j + 1) - start(j); }
};

// A segment cut into pipelining chunks of at most `elems` elements (fewer than kMaxChunks).
struct Chunking {
  uint64_t elems;
  static Chunking for_segment(uint64_t max_segment, size_t chunk_bytes, size_t elem_size) {
    uint64_t e = chunk_bytes / elem_size;
    if (e == 0) e = 1;
    const uint64_t floor_for_tags = (max_segment + kMaxChunks - 2) / (kMaxChunks - 1);
    return Chunking{e > floor_for_tags ? e : (floor_for_tags > 0 ? floor_for_tags : 1)};
  }
  uint32_t count(uint64_t len) const { return static_cast<uint32_t>((len + elems - 1) / elems); }
  uint64_t offset(uint32_t c) const { return c * elems; }
  uint64_t length(uint64_t len, uint32_t c) const {
    const uint64_t off = offset(c);
    return len - off < elems ? len - off : elems;
  }
};

}  // namespace gw::coll
