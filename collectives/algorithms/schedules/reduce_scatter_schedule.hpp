// The schedule of the compressed reduce-scatter, which compressed_reduce_scatter.cpp (host
// buffers) and device_reduce_scatter.cpp (device buffers) both run, so that the same inputs
// give the same messages on either: block r (counts[r] elements, packed in rank order) is
// owned by rank r; every rank encodes its contribution to each other block once, chunk by
// chunk, and sends it straight to the owner; the owner adds them in rank order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/algorithms/schedules/ef_rules.hpp"
#include "collectives/common/context.hpp"
#include "collectives/common/message_step.hpp"
#include "gradwire/codec.hpp"

namespace gw::coll {

struct ReduceScatterSchedule {
  int rank;
  int size;
  std::vector<uint64_t> start;  // size + 1 entries: block r is [start[r], start[r + 1])
  Chunking chunks;              // every block is cut alike: chunk k of block r is message (r, k)
  uint32_t max_chunks;
  uint64_t base_step;  // call_stream_step: the call's random-stream key

  template <class Ef>
  static ReduceScatterSchedule make(const Context& c, const uint64_t* counts, const Ef* ef) {
    std::vector<uint64_t> start(static_cast<size_t>(c.size) + 1, 0);
    uint64_t longest = 0;
    for (int r = 0; r < c.size; ++r) {
      start[r + 1] = start[r] + counts[r];
      longest = counts[r] > longest ? counts[r] : longest;
    }
    const Chunking chunks = Chunking::for_segment(longest, c.chunk_bytes, sizeof(float));
    return ReduceScatterSchedule{
        c.rank, c.size, std::move(start), chunks, chunks.count(longest), call_stream_step(c, ef)};
  }

  uint64_t total() const { return start[static_cast<size_t>(size)]; }
  uint64_t block_len(int r) const { return start[r + 1] - start[r]; }
  uint64_t own_start() const { return start[rank]; }
  uint64_t own_len() const { return block_len(rank); }
  uint32_t block_chunks(int r) const { return chunks.count(block_len(r)); }
  uint64_t chunk_len(int r, uint32_t k) const { return chunks.length(block_len(r), k); }
  // Chunk k of block r, from the start of the buffer.
  uint64_t chunk_start(int r, uint32_t k) const { return start[r] + chunks.offset(k); }

  // Receive slots: (peer, chunk of my block).
  size_t slots() const { return static_cast<size_t>(size) * max_chunks; }
  size_t slot(int peer, uint32_t k) const { return static_cast<size_t>(peer) * max_chunks + k; }

  uint64_t tag(const Context& c, uint32_t k) const { return c.tag(0, k); }
  EncodeContext encode_context(uint32_t k) const {
    return EncodeContext{message_step(base_step, 0, k), static_cast<uint32_t>(rank)};
  }
  // The i-th owner (1 <= i < size) this rank sends to: staggered from rank + 1, so that
  // owners are not all hit at once.
  int send_peer(int i) const { return (rank + i) % size; }
};

}  // namespace gw::coll
