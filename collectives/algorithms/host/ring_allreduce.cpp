// Dense ring all-reduce: p - 1 reduce-scatter steps then p - 1 all-gather steps, each
// segment cut into chunks so that a chunk moves on as soon as it has been reduced.
//
// Step s sends segment send_seg(s) to the next rank and receives recv_seg(s) from the
// previous one; send_seg(s + 1) == recv_seg(s), which is what lets chunks flow through.
// Every op (reduce.hpp): each segment is reduced once, in one order, along the ring and then
// copied to every rank, so all ranks hold the same bits (NaN payloads and signed zeros too).
#include <cstring>
#include <string>

#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/checks/call_check.hpp"
#include "collectives/common/reduce.hpp"

namespace gw::coll {

Status ring_allreduce(Context& c, const void* send, void* recv, size_t n, DType dtype, ReduceOp op) {
  const size_t es = dtype_size(dtype);
  if (send != recv && n > 0) std::memmove(recv, send, n * es);
  const int p = c.size;
  if (p == 1 || n == 0) return Status::ok();

  auto* data = static_cast<uint8_t*>(recv);
  const Partition part{n, static_cast<uint64_t>(p)};
  const Chunking chunks = Chunking::for_segment(part.length(0), c.chunk_bytes, es);
  const uint32_t max_chunks = chunks.count(part.length(0));
  const int rs_steps = p - 1;
  const int steps = 2 * (p - 1);
  auto send_seg = [&](int s) { return s < rs_steps ? c.wrap(c.rank - s) : c.wrap(c.rank + 1 - (s - rs_steps)); };
  auto recv_seg = [&](int s) { return s < rs_steps ? c.wrap(c.rank - s - 1) : c.wrap(c.rank - (s - rs_steps)); };

  // The call's descriptor rides at the head of step 0's first chunk (check graph kRingHead):
  // r - 1's lands in the room ahead of tmp[0], and a longer message of a mismatched call in
  // the room behind it.
  const bool head = c.ring_head_pending();
  constexpr size_t kRoom = CallCheck::kHeadRoom;
  uint8_t* tmp[2] = {c.scratch.bytes.get<uint8_t>(0, kRoom + part.length(0) * es + kRoom) + kRoom,
                     c.scratch.bytes.get<uint8_t>(1, part.length(0) * es)};
  transport::Op* sends = c.scratch.sends.get(static_cast<size_t>(steps) * max_chunks);
  transport::Op* recvs = c.scratch.recvs.get(static_cast<size_t>(steps) * max_chunks);
  auto op_at = [&](transport::Op* ops, int s, uint32_t k) -> transport::Op& {
    return ops[static_cast<size_t>(s) * max_chunks + k];
  };
  // Reduce-scatter steps receive into a temporary; all-gather steps straight into place.
  auto recv_dst = [&](int s, uint32_t k) {
    const uint64_t off = chunks.offset(k) * es;
    return s < rs_steps ? tmp[s % 2] + off : data + part.start(static_cast<uint64_t>(recv_seg(s))) * es + off;
  };
  // Step 0's chunks; with the descriptor riding, at least one (an empty segment, n < p,
  // still sends and receives a message that carries it).
  auto nchunks = [&](int s, uint64_t len) -> uint32_t {
    const uint32_t k = chunks.count(len);
    return s == 0 && head && k == 0 ? 1 : k;
  };
  transport::Op* first = nullptr;  // r - 1's first message, when it carries its descriptor
  auto recv_op = [&](int s, uint32_t k) -> transport::Op& {
    return s == 0 && k == 0 && first != nullptr ? *first : op_at(recvs, s, k);
  };
  auto post_recvs = [&](int s) -> Status {
    const uint64_t len = part.length(static_cast<uint64_t>(recv_seg(s)));
    for (uint32_t k = 0; k < nchunks(s, len); ++k) {
      if (s == 0 && k == 0 && head) {
        GW_ASSIGN_OR_RETURN(first, c.check->recv_ring_head(c.tp, recv_dst(0, 0), chunks.length(len, 0) * es));
        continue;
      }
      GW_RETURN_IF_ERROR(c.tp.irecv(c.prev(), c.tag(static_cast<uint32_t>(s), k), recv_dst(s, k),
                                    chunks.length(len, k) * es, op_at(recvs, s, k)));
    }
    return Status::ok();
  };
  auto post_send = [&](int s, uint32_t k) -> Status {
    const uint64_t seg = static_cast<uint64_t>(send_seg(s));
    const uint64_t len = part.length(seg);
    const uint8_t* from = data + (part.start(seg) + chunks.offset(k)) * es;
    if (s == 0 && k == 0 && head)
      return c.check->send_ring_head(c.tp, from, chunks.length(len, k) * es, op_at(sends, s, k));
    return c.tp.isend(c.next(), c.tag(static_cast<uint32_t>(s), k), from, chunks.length(len, k) * es,
                      op_at(sends, s, k));
  };
  auto wait_sends = [&](int s) -> Status {
    const uint32_t nk = nchunks(s, part.length(static_cast<uint64_t>(send_seg(s))));
    for (uint32_t k = 0; k < nk; ++k) GW_RETURN_IF_ERROR(c.wait(op_at(sends, s, k)));
    return Status::ok();
  };

  GW_RETURN_IF_ERROR(post_recvs(0));
  for (uint32_t k = 0; k < nchunks(0, part.length(static_cast<uint64_t>(send_seg(0)))); ++k) {
    GW_RETURN_IF_ERROR(post_send(0, k));
  }
  for (int s = 0; s < steps; ++s) {
    if (s + 1 < steps) {
      // An all-gather receive lands on a segment this rank sent during reduce-scatter:
      // that send must be finished first.
      if (s + 1 >= rs_steps) GW_RETURN_IF_ERROR(wait_sends(s + 1 - rs_steps));
      GW_RETURN_IF_ERROR(post_recvs(s + 1));
    }
    const uint64_t seg = static_cast<uint64_t>(recv_seg(s));
    const uint64_t len = part.length(seg);
    for (uint32_t k = 0; k < nchunks(s, len); ++k) {
      transport::Op& got = recv_op(s, k);
      GW_RETURN_IF_ERROR(c.wait(got));
      if (got.bytes != chunks.length(len, k) * es) {
        return Status(Code::kRemote, "rank " + std::to_string(c.prev()) + " sent " + std::to_string(got.bytes) +
                                         " bytes for chunk " + std::to_string(k) + " of segment " +
                                         std::to_string(seg) + ", expected " +
                                         std::to_string(chunks.length(len, k) * es));
      }
      if (s < rs_steps) {
        uint8_t* mine = data + (part.start(seg) + chunks.offset(k)) * es;
        reduce_into(mine, recv_dst(s, k), chunks.length(len, k), dtype, op);
        if (s == rs_steps - 1 && op == ReduceOp::kAvg) divide(mine, chunks.length(len, k), dtype, p);
      }
      if (s + 1 < steps && k < chunks.count(len)) GW_RETURN_IF_ERROR(post_send(s + 1, k));
    }
  }
  for (int s = 0; s < steps; ++s) GW_RETURN_IF_ERROR(wait_sends(s));
  return Status::ok();
}

}  // namespace gw::coll
