// Ring reduce-scatter: p - 1 steps; at step s a rank sends segment rank - s - 1 (its own data
// at step 0, else what it reduced at step s - 1) to the next rank and receives segment
// rank - s - 2 from the previous one, which it reduces with its own data. Segment `rank`
// arrives last, reduced over every other rank, and lands in out. Chunks move on as soon as
// they have been reduced. Also the reduce-scatter of the public API (equal blocks).
#include <cstring>
#include <string>

#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/common/reduce.hpp"

namespace gw::coll {

Status ring_reduce_scatter(Context& c, const void* send, void* out, const Partition& part, DType dtype, ReduceOp op) {
  const size_t es = dtype_size(dtype);
  const auto* src = static_cast<const uint8_t*>(send);
  auto* dst = static_cast<uint8_t*>(out);
  const uint64_t own = static_cast<uint64_t>(c.rank);
  if (part.length(own) > 0 && dst != src + part.start(own) * es) {
    std::memmove(dst, src + part.start(own) * es, part.length(own) * es);
  }
  const int p = c.size;
  const uint64_t longest = part.length(0);
  if (p == 1 || longest == 0) return Status::ok();

  const Chunking chunks = Chunking::for_segment(longest, c.chunk_bytes, es);
  const size_t mk = chunks.count(longest);
  const int steps = p - 1;
  auto send_seg = [&](int s) { return static_cast<uint64_t>(c.wrap(c.rank - s - 1)); };
  auto recv_seg = [&](int s) { return static_cast<uint64_t>(c.wrap(c.rank - s - 2)); };
  uint8_t* buf[2] = {c.scratch.bytes.get<uint8_t>(0, longest * es), c.scratch.bytes.get<uint8_t>(1, longest * es)};
  transport::Op* sends = c.scratch.sends.get(static_cast<size_t>(steps) * mk);
  transport::Op* recvs = c.scratch.recvs.get(static_cast<size_t>(steps) * mk);
  auto at = [&](transport::Op* ops, int s, uint32_t k) -> transport::Op& {
    return ops[static_cast<size_t>(s) * mk + k];
  };

  auto post_recvs = [&](int s) -> Status {
    const uint64_t len = part.length(recv_seg(s));
    for (uint32_t k = 0; k < chunks.count(len); ++k) {
      GW_RETURN_IF_ERROR(c.tp.irecv(c.prev(), c.tag(static_cast<uint32_t>(s), k), buf[s % 2] + chunks.offset(k) * es,
                                    chunks.length(len, k) * es, at(recvs, s, k)));
    }
    return Status::ok();
  };
  // Step 0 sends this rank's data; step s > 0 what it reduced at step s - 1.
  auto post_send = [&](int s, uint32_t k) -> Status {
    const uint64_t seg = send_seg(s);
    const uint8_t* from =
        s == 0 ? src + (part.start(seg) + chunks.offset(k)) * es : buf[(s - 1) % 2] + chunks.offset(k) * es;
    return c.tp.isend(c.next(), c.tag(static_cast<uint32_t>(s), k), from, chunks.length(part.length(seg), k) * es,
                      at(sends, s, k));
  };

  GW_RETURN_IF_ERROR(post_recvs(0));
  for (uint32_t k = 0; k < chunks.count(part.length(send_seg(0))); ++k) GW_RETURN_IF_ERROR(post_send(0, k));
  for (int s = 0; s < steps; ++s) {
    if (s + 1 < steps) {
      // Step s + 1 receives into the buffer step s sends from.
      if (s > 0) {
        for (uint32_t k = 0; k < chunks.count(part.length(send_seg(s))); ++k)
          GW_RETURN_IF_ERROR(c.wait(at(sends, s, k)));
      }
      GW_RETURN_IF_ERROR(post_recvs(s + 1));
    }
    const uint64_t seg = recv_seg(s);
    const uint64_t len = part.length(seg);
    for (uint32_t k = 0; k < chunks.count(len); ++k) {
      transport::Op& got = at(recvs, s, k);
      GW_RETURN_IF_ERROR(c.wait(got));
      const uint64_t want = chunks.length(len, k);
      if (got.bytes != want * es) {
        return Status(Code::kRemote, "rank " + std::to_string(c.prev()) + " sent " + std::to_string(got.bytes) +
                                         " bytes for chunk " + std::to_string(k) + " of segment " +
                                         std::to_string(seg) + ", expected " + std::to_string(want * es));
      }
      uint8_t* partial = buf[s % 2] + chunks.offset(k) * es;
      if (s + 1 < steps) {
        reduce_into(partial, src + (part.start(seg) + chunks.offset(k)) * es, want, dtype, op);
        GW_RETURN_IF_ERROR(post_send(s + 1, k));
      } else {
        reduce_into(dst + chunks.offset(k) * es, partial, want, dtype, op);
      }
    }
  }
  return c.wait_all(sends, static_cast<size_t>(steps) * mk);
}

Status reduce_scatter(Context& c, const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op) {
  const Partition part{recv_count * static_cast<uint64_t>(c.size), static_cast<uint64_t>(c.size)};
  GW_RETURN_IF_ERROR(ring_reduce_scatter(c, send, recv, part, dtype, op));
  if (op == ReduceOp::kAvg) divide(recv, recv_count, dtype, c.size);
  return Status::ok();
}

}  // namespace gw::coll
