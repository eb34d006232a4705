// Ring all-gather of blocks that may differ in size: at step s a rank forwards the block it
// received at step s - 1 (its own at step 0). Also the fixed-size all-gather.
#include <cstring>

#include "collectives/algorithms.hpp"
#include "collectives/allgatherv.hpp"

namespace gw::coll {

Status ring_allgatherv(Context& c, uint8_t* data, const uint64_t* offsets, const uint64_t* lengths) {
  const int p = c.size;
  if (p == 1) return Status::ok();
  transport::Op* sends = c.scratch.sends.get(static_cast<size_t>(p));
  transport::Op* recvs = c.scratch.recvs.get(static_cast<size_t>(p));
  auto block = [&](int s) { return c.wrap(c.rank - s); };  // sent at step s
  for (int s = 0; s < p - 1; ++s) {
    const int in = c.wrap(c.rank - s - 1);
    GW_RETURN_IF_ERROR(c.tp.irecv(c.prev(), c.tag(static_cast<uint32_t>(s), 0), data + offsets[in],
                                  lengths[in], recvs[s]));
  }
  for (int s = 0; s < p - 1; ++s) {
    const int out = block(s);
    if (s > 0) {
      GW_RETURN_IF_ERROR(c.wait(recvs[s - 1]));
      if (recvs[s - 1].bytes != lengths[out]) {
        return Status(Code::kRemote, "rank " + std::to_string(c.prev()) + " sent " +
                                         std::to_string(recvs[s - 1].bytes) + " bytes for block " +
                                         std::to_string(out) + ", expected " + std::to_string(lengths[out]));
      }
    }
    GW_RETURN_IF_ERROR(c.tp.isend(c.next(), c.tag(static_cast<uint32_t>(s), 0), data + offsets[out],
                                  lengths[out], sends[s]));
  }
  const int last = c.wrap(c.rank - (p - 1));
  GW_RETURN_IF_ERROR(c.wait(recvs[p - 2]));
  if (recvs[p - 2].bytes != lengths[last]) {
    return Status(Code::kRemote, "rank " + std::to_string(c.prev()) + " sent " + std::to_string(recvs[p - 2].bytes) +
                                     " bytes for block " + std::to_string(last) + ", expected " + std::to_string(lengths[last]));
  }
  return c.wait_all(sends, static_cast<size_t>(p - 1));
}

Status allgather(Context& c, const void* send, void* recv, size_t bytes) {
  auto* data = static_cast<uint8_t*>(recv);
  uint64_t* offsets = c.scratch.bytes.get<uint64_t>(6, static_cast<size_t>(c.size));
  uint64_t* lengths = c.scratch.bytes.get<uint64_t>(7, static_cast<size_t>(c.size));
  for (int r = 0; r < c.size; ++r) {
    offsets[r] = static_cast<uint64_t>(r) * bytes;
    lengths[r] = bytes;
  }
  uint8_t* mine = data + offsets[c.rank];
  if (bytes > 0 && mine != send) std::memmove(mine, send, bytes);
  return ring_allgatherv(c, data, offsets, lengths);
}

}  // namespace gw::coll
