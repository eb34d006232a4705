// Rabenseifner's dense all-reduce: a reduce-scatter by recursive halving, then an all-gather
// by recursive doubling. The ring's bytes (2 (p - 1) / p of the buffer per rank) in 2 log p
// steps instead of 2 (p - 1): the dense choice for mid-sized buffers at scale. Any dtype, any
// op.
//
// Halving step k sends the half of what this rank holds that the partner at distance
// p/2, p/4, ... keeps, straight from the buffer, and reduces the partner's half of what it
// keeps into the buffer; each segment (a partition into 2^m owners) ends reduced on its owner
// alone, so every rank gets the same bits from the all-gather. Doubling step k swaps the
// 2^k owners' segments a rank holds with the partner's, received in place: no copies. Each
// step's range goes in chunks of the pipelining unit (Chunking), all sent at once and reduced
// as they arrive. The last halving step and the first doubling step have the same partner:
// each chunk of this rank's segment goes back to it as soon as it is reduced, as the ring's
// all-gather follows its reduce-scatter chunk by chunk. With p = 2^m + e, the e folded ranks
// of doubling.hpp hand their buffer in first and get the result back last.
#include <algorithm>
#include <cstring>

#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/common/doubling.hpp"
#include "collectives/common/reduce.hpp"

namespace gw::coll {

Status rabenseifner_allreduce(Context& c, const void* send, void* recv, size_t n, DType dtype, ReduceOp op) {
  const size_t es = dtype_size(dtype);
  if (send != recv && n > 0) std::memmove(recv, send, n * es);
  const int p = c.size;
  if (p == 1 || n == 0) return Status::ok();
  auto* data = static_cast<uint8_t*>(recv);
  const Doubling d(c.rank, p);
  const uint64_t owners = static_cast<uint64_t>(d.pof2);
  const Partition part{n, owners};
  auto chunking = [&](uint64_t e) { return Chunking::for_segment(e, c.chunk_bytes, es); };
  auto pieces = [&](uint64_t e) { return e == 0 ? uint32_t{0} : chunking(e).count(e); };
  // The fold's whole buffer is the most anything sends or takes in at once.
  const uint32_t max_pieces = std::max<uint32_t>(1, pieces(n));
  uint8_t* in = c.scratch.bytes.get<uint8_t>(0, n * es);
  // Room for two steps' chunks: the last halving step runs the first doubling step's too.
  transport::Op* sends = c.scratch.sends.get(2 * size_t{max_pieces});
  transport::Op* recvs = c.scratch.recvs.get(2 * size_t{max_pieces});

  // Elements [at, at + e) of data out to `to` as chunks (step's tags), with elements
  // [kat, kat + ke) in from `from`: reduced into data through `in` (reduce), or received in
  // place. to or from may be -1. With `then` (the last halving step), each reduced chunk is
  // this rank's segment's: averaged if need be and sent back to `from` at once (step s + 1),
  // whose segment [then->at, + then->e) comes back in place meanwhile.
  struct Then {
    uint64_t at, e;
  };
  auto step = [&](int to, uint64_t at, uint64_t e, int from, uint64_t kat, uint64_t ke, uint32_t s, bool reduce,
                  const Then* then = nullptr) -> Status {
    const Chunking cs = chunking(e), ck = chunking(ke);
    const uint32_t ns = to >= 0 ? pieces(e) : 0, nk = from >= 0 ? pieces(ke) : 0;
    transport::Op* back = sends + max_pieces;    // the reduced chunks sent back
    transport::Op* theirs = recvs + max_pieces;  // the partner's segment
    const Chunking ct = chunking(then != nullptr ? then->e : 0);
    const uint32_t nt = then != nullptr ? pieces(then->e) : 0;
    for (uint32_t j = 0; j < nt; ++j) {
      GW_RETURN_IF_ERROR(c.tp.irecv(from, c.tag(s + 1, j), data + (then->at + ct.offset(j)) * es,
                                    ct.length(then->e, j) * es, theirs[j]));
    }
    for (uint32_t j = 0; j < nk; ++j) {
      uint8_t* dst = (reduce ? in : data + kat * es) + ck.offset(j) * es;
      GW_RETURN_IF_ERROR(c.tp.irecv(from, c.tag(s, j), dst, ck.length(ke, j) * es, recvs[j]));
    }
    for (uint32_t j = 0; j < ns; ++j) {
      GW_RETURN_IF_ERROR(c.tp.isend(to, c.tag(s, j), data + (at + cs.offset(j)) * es, cs.length(e, j) * es, sends[j]));
    }
    for (uint32_t j = 0; j < nk; ++j) {
      GW_RETURN_IF_ERROR(c.wait(recvs[j]));
      const uint64_t len = ck.length(ke, j);
      if (recvs[j].bytes != len * es) {
        return Status(Code::kRemote, "rank " + std::to_string(from) + " sent " + std::to_string(recvs[j].bytes) +
                                         " bytes at Rabenseifner step " + std::to_string(s) + ", expected " +
                                         std::to_string(len * es));
      }
      if (reduce) reduce_into(data + (kat + ck.offset(j)) * es, in + ck.offset(j) * es, len, dtype, op);
      if (then != nullptr) {
        uint8_t* mine = data + (kat + ck.offset(j)) * es;
        if (op == ReduceOp::kAvg) divide(mine, len, dtype, p);
        GW_RETURN_IF_ERROR(c.tp.isend(from, c.tag(s + 1, j), mine, len * es, back[j]));
      }
    }
    for (uint32_t j = 0; j < nt; ++j) {
      GW_RETURN_IF_ERROR(c.wait(theirs[j]));
      if (theirs[j].bytes != ct.length(then->e, j) * es) {
        return Status(Code::kRemote, "rank " + std::to_string(from) + " sent " + std::to_string(theirs[j].bytes) +
                                         " bytes at Rabenseifner step " + std::to_string(s + 1) + ", expected " +
                                         std::to_string(ct.length(then->e, j) * es));
      }
    }
    for (uint32_t j = 0; j < ns; ++j) GW_RETURN_IF_ERROR(c.wait(sends[j]));
    for (uint32_t j = 0; j < (then != nullptr ? nk : 0); ++j) GW_RETURN_IF_ERROR(c.wait(back[j]));
    return Status::ok();
  };
  const uint32_t m = static_cast<uint32_t>(d.m);
  const uint32_t last = 2 * m + 1;

  if (d.folded >= 0) {  // hand the buffer in, take the result back in place
    GW_RETURN_IF_ERROR(step(d.folded, 0, n, -1, 0, 0, 0, false));
    return step(-1, 0, 0, d.folded, 0, n, last, false);
  }
  if (d.takes >= 0) GW_RETURN_IF_ERROR(step(-1, 0, 0, d.takes, 0, n, 0, true));
  const uint64_t v = static_cast<uint64_t>(d.newrank);
  uint64_t lo = 0, hi = owners;
  for (uint32_t k = 0; k < m; ++k) {  // halving: distance 2^(m-1-k)
    const HalvingStep h = halving_step(d, static_cast<int>(k), lo, hi);
    const int peer = h.peer;
    const uint64_t slo = h.send_lo, shi = h.send_hi, klo = h.keep_lo, khi = h.keep_hi;
    // The last step keeps segment v, the whole sum here (averaged once, here), and runs the
    // first doubling step with it: the partner's segment is the one it was sent.
    const Then first_doubling{part.start(slo), part.start(shi) - part.start(slo)};
    GW_RETURN_IF_ERROR(step(peer, part.start(slo), part.start(shi) - part.start(slo), peer, part.start(klo),
                            part.start(khi) - part.start(klo), k + 1, true, k + 1 == m ? &first_doubling : nullptr));
    lo = klo;
    hi = khi;
  }
  for (uint32_t k = 1; k < m; ++k) {  // doubling: distance 2^k, the held owners' segments swapped
    const uint64_t w = uint64_t{1} << k;
    const int peer = d.rank_of(static_cast<int>(v ^ w));
    const uint64_t mlo = v & ~(w - 1), plo = mlo ^ w;
    GW_RETURN_IF_ERROR(step(peer, part.start(mlo), part.start(mlo + w) - part.start(mlo), peer, part.start(plo),
                            part.start(plo + w) - part.start(plo), m + 1 + k, false));
  }
  if (d.takes >= 0) GW_RETURN_IF_ERROR(step(d.takes, 0, n, -1, 0, 0, last, false));
  return Status::ok();
}

}  // namespace gw::coll
