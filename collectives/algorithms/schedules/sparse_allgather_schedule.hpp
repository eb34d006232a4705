// The schedule of the sparse all-gather all-reduce, which sparse_allgather.cpp (host buffers)
// and device_sparse_allgather.cpp (device buffers) both run: one message from every rank to
// every rank, each sent as fixed pieces (message_pieces.hpp), and summed in rank order.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/algorithms/schedules/ef_rules.hpp"
#include "collectives/common/context.hpp"
#include "collectives/common/message_pieces.hpp"
#include "gradwire/codec.hpp"

namespace gw::coll {

struct SparseAllgatherSchedule {
  int rank;
  int size;
  MessagePieces pieces;  // of a message of at most the cap every rank computes alike
  uint64_t base_step;    // call_stream_step: the call's (and its piece's) random-stream key

  // cap: the codec's bound on one message (all ranks encode the same count with one codec).
  template <class Ef>
  static SparseAllgatherSchedule make(const Context& c, size_t cap, const Ef* ef) {
    return SparseAllgatherSchedule{c.rank, c.size, MessagePieces::for_cap(cap, c.chunk_bytes), call_stream_step(c, ef)};
  }

  // One message per rank and call: it is keyed by the call's step itself.
  EncodeContext encode_context() const { return EncodeContext{base_step, static_cast<uint32_t>(rank)}; }
  uint64_t tag(const Context& c, uint32_t piece) const { return c.tag(0, piece); }
  // The op of piece j of rank r's message, among size * pieces.count.
  size_t op_index(int r, uint32_t j) const { return static_cast<size_t>(r) * pieces.count + j; }
  // The i-th peer (1 <= i < size) this rank sends its pieces to (piece by piece across the
  // peers), staggered so that no rank is everyone's first; receives are posted from rank - 1
  // down. Messages are added in rank order 0, 1, ..., so every rank holds the same bits.
  int send_peer(int i) const { return (rank + i) % size; }
  int recv_peer(int i) const { return ((rank - i) % size + size) % size; }
};

}  // namespace gw::coll
