// Pipelined chain broadcast: ranks in order from the root, each chunk forwarded as soon as
// it arrives, so large buffers move at link speed whatever p is.
#include "collectives/algorithms/host/algorithms.hpp"

namespace gw::coll {

Status broadcast(Context& c, void* buf, size_t bytes, int root) {
  const int p = c.size;
  if (p == 1 || bytes == 0) return Status::ok();
  auto* data = static_cast<uint8_t*>(buf);
  const Chunking chunks = Chunking::for_segment(bytes, c.chunk_bytes, 1);
  const uint32_t nk = chunks.count(bytes);
  const int pos = c.wrap(c.rank - root);
  const bool has_next = pos < p - 1;
  transport::Op* sends = c.scratch.sends.get(nk);
  transport::Op* recvs = c.scratch.recvs.get(nk);
  if (pos > 0) {
    for (uint32_t k = 0; k < nk; ++k) {
      GW_RETURN_IF_ERROR(c.tp.irecv(c.prev(), c.tag(0, k), data + chunks.offset(k), chunks.length(bytes, k), recvs[k]));
    }
  }
  for (uint32_t k = 0; k < nk; ++k) {
    if (pos > 0) {
      GW_RETURN_IF_ERROR(c.wait(recvs[k]));
      if (recvs[k].bytes != chunks.length(bytes, k)) {
        return Status(Code::kRemote, "broadcast chunk from rank " + std::to_string(c.prev()) + " has the wrong size");
      }
    }
    if (has_next) {
      GW_RETURN_IF_ERROR(c.tp.isend(c.next(), c.tag(0, k), data + chunks.offset(k), chunks.length(bytes, k), sends[k]));
    }
  }
  return c.wait_all(sends, nk);
}

}  // namespace gw::coll
