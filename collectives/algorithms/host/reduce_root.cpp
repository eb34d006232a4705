// Reduce to a root: a ring reduce-scatter over p balanced segments (reduce_scatter.cpp), then
// every rank sends its reduced segment to the root. Each rank moves about 2n/p elements
// whatever p is, and the root receives n (as with a chain, without its p-step latency).
#include <cstring>
#include <string>

#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/common/reduce.hpp"

namespace gw::coll {

Status reduce(Context& c, const void* send, void* recv, size_t n, DType dtype, ReduceOp op, int root) {
  const size_t es = dtype_size(dtype);
  const int p = c.size;
  const bool is_root = c.rank == root;
  const Partition part{n, static_cast<uint64_t>(p)};
  const uint64_t own = static_cast<uint64_t>(c.rank);
  // The root reduces its segment straight into place; the others into scratch.
  auto* mine = is_root ? static_cast<uint8_t*>(recv) + part.start(own) * es
                       : c.scratch.bytes.get<uint8_t>(2, part.length(own) * es);
  GW_RETURN_IF_ERROR(ring_reduce_scatter(c, send, mine, part, dtype, op));
  if (op == ReduceOp::kAvg) divide(mine, part.length(own), dtype, p);
  if (p == 1 || n == 0) return Status::ok();

  const Chunking chunks = Chunking::for_segment(part.length(0), c.chunk_bytes, es);
  const auto step = static_cast<uint32_t>(p - 1);  // after the reduce-scatter's steps 0 .. p - 2
  if (!is_root) {
    const uint64_t len = part.length(own);
    const uint32_t nk = chunks.count(len);
    transport::Op* sends = c.scratch.sends.get(nk);
    for (uint32_t k = 0; k < nk; ++k) {
      GW_RETURN_IF_ERROR(
          c.tp.isend(root, c.tag(step, k), mine + chunks.offset(k) * es, chunks.length(len, k) * es, sends[k]));
    }
    return c.wait_all(sends, nk);
  }
  const size_t mk = chunks.count(part.length(0));
  transport::Op* recvs = c.scratch.recvs.get(static_cast<size_t>(p) * mk);
  auto* out = static_cast<uint8_t*>(recv);
  for (int r = 0; r < p; ++r) {
    if (r == root) continue;
    const uint64_t seg = static_cast<uint64_t>(r);
    for (uint32_t k = 0; k < chunks.count(part.length(seg)); ++k) {
      GW_RETURN_IF_ERROR(c.tp.irecv(r, c.tag(step, k), out + (part.start(seg) + chunks.offset(k)) * es,
                                    chunks.length(part.length(seg), k) * es, recvs[static_cast<size_t>(r) * mk + k]));
    }
  }
  for (int r = 0; r < p; ++r) {
    if (r == root) continue;
    const uint64_t len = part.length(static_cast<uint64_t>(r));
    for (uint32_t k = 0; k < chunks.count(len); ++k) {
      transport::Op& got = recvs[static_cast<size_t>(r) * mk + k];
      GW_RETURN_IF_ERROR(c.wait(got));
      if (got.bytes != chunks.length(len, k) * es) {
        return Status(Code::kRemote, "reduce: rank " + std::to_string(r) + " sent " + std::to_string(got.bytes) +
                                         " bytes for chunk " + std::to_string(k) + " of its segment, expected " +
                                         std::to_string(chunks.length(len, k) * es));
      }
    }
  }
  return Status::ok();
}

}  // namespace gw::coll
