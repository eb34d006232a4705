// Gather and scatter: the root exchanges one block with every other rank, each cut into
// chunks; all of the root's receives (or sends) are posted at once.
#include <cstring>
#include <string>

#include "collectives/algorithms/host/algorithms.hpp"

namespace gw::coll {
namespace {

Status check_length(const transport::Op& got, uint64_t want, const char* what, int peer, uint32_t k) {
  if (got.bytes == want) return Status::ok();
  return Status(Code::kRemote, std::string(what) + ": rank " + std::to_string(peer) + " sent " +
                                   std::to_string(got.bytes) + " bytes for chunk " + std::to_string(k) + ", expected " +
                                   std::to_string(want));
}

}  // namespace

Status gather(Context& c, const void* send, void* recv, size_t bytes, int root) {
  const int p = c.size;
  auto* out = static_cast<uint8_t*>(recv);
  if (c.rank == root && bytes > 0 && out + static_cast<size_t>(root) * bytes != send) {
    std::memmove(out + static_cast<size_t>(root) * bytes, send, bytes);
  }
  if (p == 1 || bytes == 0) return Status::ok();
  const Chunking chunks = Chunking::for_segment(bytes, c.chunk_bytes, 1);
  const uint32_t nk = chunks.count(bytes);
  if (c.rank != root) {
    transport::Op* sends = c.scratch.sends.get(nk);
    for (uint32_t k = 0; k < nk; ++k) {
      GW_RETURN_IF_ERROR(c.tp.isend(root, c.tag(0, k), static_cast<const uint8_t*>(send) + chunks.offset(k),
                                    chunks.length(bytes, k), sends[k]));
    }
    return c.wait_all(sends, nk);
  }
  transport::Op* recvs = c.scratch.recvs.get(static_cast<size_t>(p) * nk);
  for (int i = 1; i < p; ++i) {
    const int r = c.wrap(root + i);
    for (uint32_t k = 0; k < nk; ++k) {
      GW_RETURN_IF_ERROR(c.tp.irecv(r, c.tag(0, k), out + static_cast<size_t>(r) * bytes + chunks.offset(k),
                                    chunks.length(bytes, k), recvs[static_cast<size_t>(r) * nk + k]));
    }
  }
  for (int i = 1; i < p; ++i) {
    const int r = c.wrap(root + i);
    for (uint32_t k = 0; k < nk; ++k) {
      transport::Op& got = recvs[static_cast<size_t>(r) * nk + k];
      GW_RETURN_IF_ERROR(c.wait(got));
      GW_RETURN_IF_ERROR(check_length(got, chunks.length(bytes, k), "gather", r, k));
    }
  }
  return Status::ok();
}

Status scatter(Context& c, const void* send, void* recv, size_t bytes, int root) {
  const int p = c.size;
  const auto* in = static_cast<const uint8_t*>(send);
  auto* out = static_cast<uint8_t*>(recv);
  if (c.rank == root && bytes > 0 && in + static_cast<size_t>(root) * bytes != out) {
    std::memmove(out, in + static_cast<size_t>(root) * bytes, bytes);
  }
  if (p == 1 || bytes == 0) return Status::ok();
  const Chunking chunks = Chunking::for_segment(bytes, c.chunk_bytes, 1);
  const uint32_t nk = chunks.count(bytes);
  if (c.rank != root) {
    transport::Op* recvs = c.scratch.recvs.get(nk);
    for (uint32_t k = 0; k < nk; ++k) {
      GW_RETURN_IF_ERROR(c.tp.irecv(root, c.tag(0, k), out + chunks.offset(k), chunks.length(bytes, k), recvs[k]));
    }
    for (uint32_t k = 0; k < nk; ++k) {
      GW_RETURN_IF_ERROR(c.wait(recvs[k]));
      GW_RETURN_IF_ERROR(check_length(recvs[k], chunks.length(bytes, k), "scatter", root, k));
    }
    return Status::ok();
  }
  transport::Op* sends = c.scratch.sends.get(static_cast<size_t>(p) * nk);
  for (int i = 1; i < p; ++i) {
    const int r = c.wrap(root + i);
    for (uint32_t k = 0; k < nk; ++k) {
      GW_RETURN_IF_ERROR(c.tp.isend(r, c.tag(0, k), in + static_cast<size_t>(r) * bytes + chunks.offset(k),
                                    chunks.length(bytes, k), sends[static_cast<size_t>(r) * nk + k]));
    }
  }
  return c.wait_all(sends, static_cast<size_t>(p) * nk);
}

}  // namespace gw::coll
