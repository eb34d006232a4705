// Dissemination barrier: ceil(log2 p) rounds of empty messages to rank + 2^i.
#include "collectives/algorithms/host/algorithms.hpp"

namespace gw::coll {

Status barrier(Context& c) {
  const int p = c.size;
  transport::Op* sends = c.scratch.sends.get(32);
  transport::Op* recvs = c.scratch.recvs.get(32);
  uint8_t byte = 0;
  uint32_t round = 0;
  for (int dist = 1; dist < p; dist *= 2, ++round) {
    GW_RETURN_IF_ERROR(c.tp.irecv(c.wrap(c.rank - dist), c.tag(round, 0), &byte, 1, recvs[round]));
    GW_RETURN_IF_ERROR(c.tp.isend(c.wrap(c.rank + dist), c.tag(round, 0), &byte, 0, sends[round]));
    GW_RETURN_IF_ERROR(c.wait(recvs[round]));
  }
  return c.wait_all(sends, round);
}

}  // namespace gw::coll
