// Ring all-gather of blocks that may differ in size: at step s a rank forwards the block it
// received at step s - 1 (its own at step 0), chunk by chunk, each chunk as soon as it has
// arrived. Also the fixed-size all-gather and the variable one of the public API.
#include <cstring>
#include <string>

#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/algorithms/host/allgatherv.hpp"
#include "collectives/algorithms/scratch_slots.hpp"

namespace gw::coll {

Status ring_allgatherv(Context& c, uint8_t* data, const uint64_t* offsets, const uint64_t* lengths) {
  const int p = c.size;
  if (p == 1) return Status::ok();
  uint64_t longest = 0;
  for (int r = 0; r < p; ++r) longest = lengths[r] > longest ? lengths[r] : longest;
  const Chunking chunks = Chunking::for_segment(longest, c.chunk_bytes, 1);
  const size_t mk = chunks.count(longest);
  if (mk == 0) return Status::ok();  // every block is empty
  const size_t steps = static_cast<size_t>(p - 1);
  transport::Op* sends = c.scratch.sends.get(steps * mk);
  transport::Op* recvs = c.scratch.recvs.get(steps * mk);
  auto block = [&](int s) { return c.wrap(c.rank - s); };  // sent at step s, received at step s - 1
  for (int s = 0; s < p - 1; ++s) {
    const int in = block(s + 1);
    for (uint32_t k = 0; k < chunks.count(lengths[in]); ++k) {
      GW_RETURN_IF_ERROR(c.tp.irecv(c.prev(), c.tag(static_cast<uint32_t>(s), k), data + offsets[in] + chunks.offset(k),
                                    chunks.length(lengths[in], k), recvs[static_cast<size_t>(s) * mk + k]));
    }
  }
  auto check = [&](int s, uint32_t k) -> Status {  // chunk k of the block received at step s
    transport::Op& got = recvs[static_cast<size_t>(s) * mk + k];
    GW_RETURN_IF_ERROR(c.wait(got));
    const int b = block(s + 1);
    const uint64_t want = chunks.length(lengths[b], k);
    if (got.bytes == want) return Status::ok();
    return Status(Code::kRemote, "rank " + std::to_string(c.prev()) + " sent " + std::to_string(got.bytes) +
                                     " bytes for chunk " + std::to_string(k) + " of block " + std::to_string(b) +
                                     ", expected " + std::to_string(want));
  };
  for (int s = 0; s < p - 1; ++s) {
    const int out = block(s);
    for (uint32_t k = 0; k < chunks.count(lengths[out]); ++k) {
      if (s > 0) GW_RETURN_IF_ERROR(check(s - 1, k));
      GW_RETURN_IF_ERROR(c.tp.isend(c.next(), c.tag(static_cast<uint32_t>(s), k),
                                    data + offsets[out] + chunks.offset(k), chunks.length(lengths[out], k),
                                    sends[static_cast<size_t>(s) * mk + k]));
    }
  }
  for (uint32_t k = 0; k < chunks.count(lengths[block(p - 1)]); ++k) GW_RETURN_IF_ERROR(check(p - 2, k));
  return c.wait_all(sends, steps * mk);
}

Status allgather(Context& c, const void* send, void* recv, size_t bytes) {
  auto* data = static_cast<uint8_t*>(recv);
  uint64_t* offsets = c.scratch.bytes.get<uint64_t>(kLayoutOffsetsSlot, static_cast<size_t>(c.size));
  uint64_t* lengths = c.scratch.bytes.get<uint64_t>(kLayoutLengthsSlot, static_cast<size_t>(c.size));
  for (int r = 0; r < c.size; ++r) {
    offsets[r] = static_cast<uint64_t>(r) * bytes;
    lengths[r] = bytes;
  }
  uint8_t* mine = data + offsets[c.rank];
  if (bytes > 0 && mine != send) std::memmove(mine, send, bytes);
  return ring_allgatherv(c, data, offsets, lengths);
}

Status allgatherv(Context& c, const void* send, void* recv, const uint64_t* displs, const uint64_t* lengths) {
  auto* data = static_cast<uint8_t*>(recv);
  uint8_t* mine = data + displs[c.rank];
  if (lengths[c.rank] > 0 && mine != send) std::memmove(mine, send, lengths[c.rank]);
  return ring_allgatherv(c, data, displs, lengths);
}

}  // namespace gw::coll
