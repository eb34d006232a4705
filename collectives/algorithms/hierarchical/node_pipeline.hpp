// The hierarchical all-reduce's legs inside a node through the node's shared segment,
// overlapped with the inter-node leg. Each local rank's slot holds its input (copied in piece
// by piece) and, for its own shard, the node's sum that the inter-node leg reduces in place;
// flags in the segment's header say which pieces are in. The shard is cut into pieces: while
// piece k crosses the inter-node links, the waits of that leg copy the next pieces in,
// reduce them, and copy finished pieces of every shard out (pump()), so the work inside the
// node hides behind the scarce links instead of adding to them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "collectives/common/context.hpp"
#include "gradwire/communicator.hpp"

namespace gw::coll {

class NodePipeline {
 public:
  static constexpr int kMaxPieces = 64;
  static size_t header_bytes(int local_size);
  // The pieces a shard of shard_bytes is cut into (at most max_pieces).
  static int pieces_for(uint64_t shard_bytes, int max_pieces);

  // seg: the mapped segment (header_bytes + local_size slots of n elements); c: the whole
  // call's context (deadline, transport, call check); gen: this call's unique flag value.
  NodePipeline(const Context& c, uint8_t* seg, int local_size, int local_rank, uint64_t n, DType dtype, ReduceOp op,
               const void* src, void* recv, uint64_t gen, int pieces);

  // Compressed calls with error feedback (float32): the node's sum of each piece is added
  // into residual (this rank's shard of the EF state) instead of written to the slot, so
  // the inter-node leg encodes from the residual without another pass over the shard.
  void accumulate_into(float* residual) { residual_ = residual; }
  // With accumulate_into, the first call after flat compressed ones: whole (n floats) is the
  // caller's EF residual, nonzero outside this rank's shard too. Each piece of another shard
  // goes into the slot as input + residual, and the residual there is cleared; this rank's
  // own shard needs nothing more (its residual is where the node's sum is added anyway).
  void flush_residual(float* whole) { flush_ = whole; }
  // Sparse results: instead of a dense shard, the inter-node leg leaves each shard's
  // messages (up to `messages`, of at most cap bytes each) in the segment's message area,
  // and every local rank decodes them into recv (zeroed first) in order, then divides by
  // divisor (> 1: kAvg). A few scattered elements instead of a copy of every shard.
  static size_t message_area_bytes(int messages, size_t cap);
  // The slots' bytes (local_size slots of n es-byte elements), rounded up so that the message
  // areas after them start 64-byte aligned.
  static size_t slots_bytes(int local_size, uint64_t n, size_t es);
  void sparse_results(int messages, size_t cap, int divisor);
  // Local rank r's message area: `messages` u64 lengths, then the messages, cap bytes apart.
  uint64_t* message_lengths(int r) const;
  uint8_t* message(int r, int m) const;
  size_t message_cap() const { return cap_; }
  // Where piece k starts in this rank's shard (elements).
  uint64_t piece_offset(int k) const { return piece_start(l_, k) - piece_start(l_, 0); }

  // Runs the pipeline: inter(k, data, len) reduces piece k of this rank's shard (in the
  // segment, or in the residual: accumulate_into) across nodes, into data (the slot; for
  // sparse results, into this rank's message area).
  // Returns when every piece of every shard is in recv (the caller then fences the node
  // with a barrier).
  Status run(const std::function<Status(int, uint8_t*, uint64_t)>& inter);
  // One step of background work, if any is ready (never blocks). True if it did something.
  bool pump();

 private:
  std::atomic<uint64_t>* flag(int kind, int r, int k) const;
  uint8_t* slot(int r) const { return seg_ + header_ + static_cast<size_t>(r) * n_ * es_; }
  uint64_t piece_start(int r, int k) const;  // element offset of piece k of shard r
  uint64_t piece_len(int r, int k) const;
  void copy_in(int k);
  bool inputs_ready(int k) const;
  void reduce(int k);
  bool copy_out_ready();
  Status decode_shard(int r);
  Status wait_until(const std::function<bool()>& ready, const char* what);

  const Context& c_;
  uint8_t* seg_;
  size_t header_;
  int L_, l_;
  uint64_t n_;
  size_t es_;
  DType dtype_;
  ReduceOp op_;
  const uint8_t* src_;
  uint8_t* recv_;
  uint64_t gen_;
  int P_;
  int next_in_ = 0, next_reduce_ = 0, current_ = 0;
  std::vector<int> next_out_;  // per local rank: the next piece of its shard to copy out
  int outs_left_ = 0;
  bool busy_ = false;
  float* residual_ = nullptr;
  float* flush_ = nullptr;
  int messages_ = 0;  // > 0: sparse results
  size_t cap_ = 0;
  int divisor_ = 1;
  Status error_;  // a message that failed to decode while pumping
};

}  // namespace gw::coll
