// What the simulator replays: every rank's program as a sequence of operations, generated on
// demand from (rank, lane, position) so that 16k ranks cost no memory for their programs.
//
// A lane is an independent stream of a rank's operations (the ring's pipelining chunks, a
// tree's up and down phases): lanes of a rank share its link ports and its core. Messages
// between two ranks on one lane are received in the order they were sent; a send may name
// the receiver's lane (a tree's root turning a chunk from its up phase to its down phase).
#pragma once

#include <cstdint>
#include <string>

namespace gw::sim {

struct Op {
  enum Kind : uint8_t {
    kSend,  // peer, bytes
    kRecv,  // peer: wait for the next message from it on this lane
    kWork,  // seconds of this rank's CPU (codec, sums)
    kSkip,  // nothing (a chunk a segment does not have)
    kEnd,
  };
  Kind kind = kEnd;
  int peer = -1;
  double amount = 0;  // bytes (kSend) or seconds (kWork)
  int to_lane = -1;   // kSend: the receiver's lane (-1: the sender's)

  static Op send(int peer, double bytes, int to_lane = -1) { return Op{kSend, peer, bytes, to_lane}; }
  static Op recv(int peer) { return Op{kRecv, peer, 0, -1}; }
  static Op work(double seconds) { return seconds > 0 ? Op{kWork, -1, seconds, -1} : skip(); }
  static Op skip() { return Op{kSkip, -1, 0, -1}; }
  static Op end() { return Op{kEnd, -1, 0, -1}; }
};

class Schedule {
 public:
  virtual ~Schedule() = default;
  virtual std::string name() const = 0;
  virtual int ranks() const = 0;
  virtual int lanes() const { return 1; }
  // The pc-th operation of rank's program on lane (kEnd past its end).
  virtual Op op(int rank, int lane, uint64_t pc) const = 0;
};

}  // namespace gw::sim
