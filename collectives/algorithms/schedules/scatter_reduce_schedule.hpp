// The schedule of the compressed scatter-reduce, which scatter_reduce_allreduce.cpp (host
// buffers) and device_scatter_reduce.cpp (device buffers) both run, so that the same inputs
// give the same messages and results on either: who owns which segment, how segments are cut
// into chunks, the two phases' tag steps and random-stream keys, and the order of the peers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/algorithms/schedules/ef_rules.hpp"
#include "collectives/common/context.hpp"
#include "collectives/common/message_step.hpp"
#include "gradwire/codec.hpp"

namespace gw::coll {

struct ScatterReduceSchedule {
  // Phase 0: every rank's contribution to a segment goes to its owner; phase 1: each owner's
  // encoded sum goes to every rank. The phase is both the tag step and the random-stream hop.
  enum Phase : uint32_t { kContribute = 0, kResult = 1 };

  int rank;
  int size;
  Partition part;   // segment j is owned by rank j (owner_segment(kScatterReduce, ...))
  Chunking chunks;  // every segment is cut alike: chunk k of segment j is message (j, k)
  uint32_t max_chunks;
  uint64_t base_step;  // call_stream_step: the call's (and its piece's) random-stream key

  template <class Ef>
  static ScatterReduceSchedule make(const Context& c, size_t n, const Ef* ef) {
    const Partition part{n, static_cast<uint64_t>(c.size)};
    const Chunking chunks = Chunking::for_segment(part.length(0), c.chunk_bytes, sizeof(float));
    return ScatterReduceSchedule{c.rank, c.size, part, chunks, chunks.count(part.length(0)), call_stream_step(c, ef)};
  }

  uint64_t own_start() const { return part.start(static_cast<uint64_t>(rank)); }
  uint64_t own_len() const { return part.length(static_cast<uint64_t>(rank)); }
  uint32_t seg_chunks(int seg) const { return chunks.count(part.length(static_cast<uint64_t>(seg))); }
  uint64_t chunk_len(int seg, uint32_t k) const { return chunks.length(part.length(static_cast<uint64_t>(seg)), k); }
  // Chunk k of segment seg, from the start of the buffer.
  uint64_t chunk_start(int seg, uint32_t k) const { return part.start(static_cast<uint64_t>(seg)) + chunks.offset(k); }

  // Message slots of one phase, (peer, chunk) each.
  size_t per_phase() const { return static_cast<size_t>(size) * max_chunks; }
  size_t slot(int peer, uint32_t k) const { return static_cast<size_t>(peer) * max_chunks + k; }

  uint64_t tag(const Context& c, Phase phase, uint32_t k) const { return c.tag(phase, k); }
  // This rank's encode of chunk k in a phase: a contribution to an owner, or its own sum.
  EncodeContext encode_context(Phase phase, uint32_t k) const {
    return EncodeContext{message_step(base_step, phase, k), static_cast<uint32_t>(rank)};
  }
  // The i-th peer (1 <= i < size) this rank sends to, in both phases: staggered from rank + 1,
  // so that owners are not all hit at once. Contributions are sent chunk by chunk across the
  // owners; an owner adds them in rank order (skipping itself), the same sum on every run.
  int send_peer(int i) const { return (rank + i) % size; }
};

}  // namespace gw::coll
