// Compressed recursive halving, then doubling (Rabenseifner's all-reduce with a codec on every
// message), for many ranks. Halving: log p steps, each sending half of what the rank still
// holds, encoded, to the partner at distance p/2, p/4, ..., 1 and adding the partner's
// decoded half into the half it keeps, until each rank holds one segment's sum; each owner
// encodes that sum once. Doubling: log p steps in which partners swap every owner message
// they hold, forwarded unchanged; every rank decodes every owner's message, its own too, so
// all ranks hold the same bits.
//
// Per rank: 2 log p messages (scatter-reduce: 2 (p - 1)) and 2 (p - 1) / p of the encoded
// buffer on the wire (as the ring and scatter-reduce); an element is compressed log p + 1
// times on its way (the compressed ring: p), so the error grows with log p (gZCCL, ICS'24).
// With p = 2^m + e, the e folded ranks of doubling.hpp hand their whole buffer in, encoded,
// before the halving and get every owner message back after the doubling.
//
// The halving steps and the fold are pipelined: the range a rank sends is cut into chunks
// (GW_CHUNK_BYTES of input, Chunking), each encoded into a message of its own and sent at
// once, so the partner's chunks cross the link while this rank encodes; they are decoded in
// order once it is done. Both partners cut the range alike (what one sends is what the other
// keeps), so every chunk has its receive posted before anything is sent.
//
// Error feedback: the accumulator is the residual (prepare_accumulator); every encode leaves
// its loss there, at the elements it encoded, and each rank encodes each element exactly once
// per call, so outputs plus residuals conserve the inputs. Halving-step losses are of partial
// sums: a rank's residual then holds some of its partners' error too, sent again next call.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/algorithms/schedules/ef_rules.hpp"
#include "collectives/common/doubling.hpp"
#include "collectives/common/message_step.hpp"

namespace gw::coll {
namespace {

void put_u64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, sizeof v); }
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

Status halving_doubling_allreduce(Context& c, const float* send, float* recv, size_t n, ReduceOp op, Codec& codec,
                                  ErrorFeedback* ef) {
  const int p = c.size;
  const Doubling d(c.rank, p);
  const uint64_t owners = static_cast<uint64_t>(d.pof2);
  const Partition part{n, owners};  // segment j: owned by the rank numbered j among the 2^m
  const uint64_t base = call_stream_step(c, ef);
  float* acc = prepare_accumulator(c, send, n, ef, 0);

  auto elems = [&](uint64_t lo, uint64_t hi) { return part.start(hi) - part.start(lo); };
  auto bound = [&](uint64_t lo, uint64_t hi) {
    const uint64_t e = elems(lo, hi);
    return e == 0 ? size_t{0} : codec.max_encoded_bytes(e, DType::kFloat32);
  };
  // Owner messages live in slots at fixed offsets; a bundle on the wire is the lengths of a
  // range of owners (8 bytes each) followed by their messages.
  std::vector<uint64_t> slot_at(owners + 1, 0), len(owners, 0);
  for (uint64_t j = 0; j < owners; ++j) slot_at[j + 1] = slot_at[j] + bound(j, j + 1);
  auto bundle_cap = [&](uint64_t lo, uint64_t hi) { return 8 * (hi - lo) + (slot_at[hi] - slot_at[lo]); };
  // A range of e elements goes as chunks; each has a slot of a whole chunk's bound.
  auto chunking = [&](uint64_t e) { return Chunking::for_segment(e, c.chunk_bytes, sizeof(float)); };
  auto chunk_slot = [&](uint64_t e) {
    return e == 0 ? size_t{0} : codec.max_encoded_bytes(std::min(chunking(e).elems, e), DType::kFloat32);
  };
  auto chunked_cap = [&](uint64_t e) { return e == 0 ? size_t{0} : chunking(e).count(e) * chunk_slot(e); };
  // The largest of what this rank sends or takes in at once: the fold's whole buffer, a
  // halving step's half, or a doubling step's bundle.
  size_t step_cap = bundle_cap(0, owners);
  uint32_t max_chunks = 1;
  auto room_for = [&](uint64_t e) {
    if (chunked_cap(e) > step_cap) step_cap = chunked_cap(e);
    if (e > 0 && chunking(e).count(e) > max_chunks) max_chunks = chunking(e).count(e);
  };
  room_for(elems(0, owners));
  {
    uint64_t lo = 0, hi = owners;
    for (int k = 0; k < d.m && d.newrank >= 0; ++k) {
      const HalvingStep h = halving_step(d, k, lo, hi);
      room_for(elems(h.send_lo, h.send_hi));
      room_for(elems(h.keep_lo, h.keep_hi));
      lo = h.keep_lo;
      hi = h.keep_hi;
    }
  }
  uint8_t* slots = c.scratch.bytes.get<uint8_t>(1, slot_at[owners]);
  uint8_t* out = c.scratch.bytes.get<uint8_t>(2, step_cap);
  uint8_t* in = c.scratch.bytes.get<uint8_t>(3, step_cap);
  transport::Op* sends = c.scratch.sends.get(max_chunks);
  transport::Op* recvs = c.scratch.recvs.get(max_chunks);

  // Encodes acc over segments [lo, hi) into out (its loss stays in acc); the length (0: no elements).
  auto encode = [&](uint64_t lo, uint64_t hi, uint32_t hop, uint8_t* dst, size_t cap) -> Result<size_t> {
    const uint64_t e = elems(lo, hi);
    if (e == 0) return size_t{0};
    const EncodeContext ctx{message_step(base, hop, 0), static_cast<uint32_t>(c.rank)};
    return timed_encode(c, codec, acc + part.start(lo), e, ctx, dst, cap);
  };
  // Sends segments [slo, shi) of acc to `to`, encoded chunk by chunk (the chunks' losses stay
  // in acc), and adds what `from` sends of segments [klo, khi) into acc, chunk by chunk: the
  // receives are posted first, each chunk leaves as soon as it is encoded, and the chunks in
  // are decoded in order after the last one out. to or from may be -1 (nothing that way).
  auto pipelined = [&](int to, uint64_t slo, uint64_t shi, int from, uint64_t klo, uint64_t khi, uint32_t step,
                       uint32_t hop) -> Status {
    const uint64_t es = to >= 0 ? elems(slo, shi) : 0, ek = from >= 0 ? elems(klo, khi) : 0;
    const Chunking cs = chunking(es), ck = chunking(ek);
    const uint32_t ns = es > 0 ? cs.count(es) : 0, nk = ek > 0 ? ck.count(ek) : 0;
    const size_t bs = chunk_slot(es), bk = chunk_slot(ek);
    for (uint32_t j = 0; j < nk; ++j) {
      GW_RETURN_IF_ERROR(c.tp.irecv(from, c.tag(step, j), in + j * bk, bk, recvs[j]));
    }
    for (uint32_t j = 0; j < ns; ++j) {
      const EncodeContext ctx{message_step(base, hop, j), static_cast<uint32_t>(c.rank)};
      GW_ASSIGN_OR_RETURN(size_t l, timed_encode(c, codec, acc + part.start(slo) + cs.offset(j), cs.length(es, j), ctx,
                                                 out + j * bs, bs));
      GW_RETURN_IF_ERROR(c.tp.isend(to, c.tag(step, j), out + j * bs, l, sends[j]));
      c.tp.progress();
    }
    for (uint32_t j = 0; j < nk; ++j) {
      GW_RETURN_IF_ERROR(c.wait(recvs[j]));
      GW_RETURN_IF_ERROR(timed_decode(c, in + j * bk, recvs[j].bytes, acc + part.start(klo) + ck.offset(j),
                                      ck.length(ek, j), DecodeMode::kAccumulate)
                             .with_context("halving-doubling message from rank " + std::to_string(from) + " (step " +
                                           std::to_string(step) + ", chunk " + std::to_string(j) + ")"));
    }
    for (uint32_t j = 0; j < ns; ++j) GW_RETURN_IF_ERROR(c.wait(sends[j]));
    return Status::ok();
  };
  auto exchange = [&](int peer, uint32_t step, size_t out_len, size_t in_cap) -> Status {
    GW_RETURN_IF_ERROR(c.tp.irecv(peer, c.tag(step, 0), in, in_cap, recvs[0]));
    GW_RETURN_IF_ERROR(c.tp.isend(peer, c.tag(step, 0), out, out_len, sends[0]));
    GW_RETURN_IF_ERROR(c.wait(recvs[0]));
    return c.wait(sends[0]);
  };
  auto pack = [&](uint64_t lo, uint64_t hi) {
    uint8_t* at = out + 8 * (hi - lo);
    for (uint64_t j = lo; j < hi; ++j) {
      put_u64(out + 8 * (j - lo), len[j]);
      if (len[j] > 0) std::memcpy(at, slots + slot_at[j], len[j]);  // slots is null when every bound is 0
      at += len[j];
    }
    return static_cast<size_t>(at - out);
  };
  // A bundle of owners [lo, hi) from peer: untrusted lengths, checked before anything is copied.
  auto unpack = [&](int peer, uint64_t lo, uint64_t hi) -> Status {
    const size_t got = recvs[0].bytes;
    const size_t head = 8 * (hi - lo);
    size_t total = head;
    for (uint64_t j = lo; j < hi && got >= head; ++j) {
      const uint64_t l = get_u64(in + 8 * (j - lo));
      if (l > bound(j, j + 1)) total = SIZE_MAX;
      if (total != SIZE_MAX) total += l;
    }
    if (got < head || total != got) {
      return Status(Code::kRemote, "rank " + std::to_string(peer) + " sent a malformed bundle of segment messages (" +
                                       std::to_string(got) + " bytes)");
    }
    const uint8_t* at = in + head;
    for (uint64_t j = lo; j < hi; ++j) {
      len[j] = get_u64(in + 8 * (j - lo));
      if (len[j] > 0) std::memcpy(slots + slot_at[j], at, len[j]);
      at += len[j];
    }
    return Status::ok();
  };
  const uint32_t m = static_cast<uint32_t>(d.m);
  const uint32_t last = 2 * m + 1;

  if (d.folded >= 0) {  // hand the whole buffer in, then take every owner's message back
    GW_RETURN_IF_ERROR(pipelined(d.folded, 0, owners, -1, 0, 0, 0, 0));
    GW_RETURN_IF_ERROR(c.tp.irecv(d.folded, c.tag(last, 0), in, bundle_cap(0, owners), recvs[0]));
    GW_RETURN_IF_ERROR(c.wait(recvs[0]));
    GW_RETURN_IF_ERROR(unpack(d.folded, 0, owners));
  } else {
    if (d.takes >= 0) GW_RETURN_IF_ERROR(pipelined(-1, 0, 0, d.takes, 0, owners, 0, 0));
    const uint64_t v = static_cast<uint64_t>(d.newrank);
    uint64_t lo = 0, hi = owners;
    for (uint32_t k = 0; k < m; ++k) {  // halving: distance 2^(m-1-k)
      const HalvingStep h = halving_step(d, static_cast<int>(k), lo, hi);
      GW_RETURN_IF_ERROR(pipelined(h.peer, h.send_lo, h.send_hi, h.peer, h.keep_lo, h.keep_hi, k + 1, k + 1));
      lo = h.keep_lo;
      hi = h.keep_hi;
    }
    // This rank owns segment v: its sum, encoded once.
    GW_ASSIGN_OR_RETURN(len[v], encode(v, v + 1, m + 1, slots + slot_at[v], bound(v, v + 1)));
    lo = v;
    hi = v + 1;
    for (uint32_t k = 0; k < m; ++k) {  // doubling: distance 2^k
      const uint64_t dist = uint64_t{1} << k;
      const int peer = d.rank_of(static_cast<int>(v ^ dist));
      const uint64_t w = hi - lo;
      const uint64_t plo = (v & dist) == 0 ? hi : lo - w, phi = plo + w;
      const size_t l = pack(lo, hi);
      GW_RETURN_IF_ERROR(exchange(peer, m + 1 + k, l, bundle_cap(plo, phi)));
      GW_RETURN_IF_ERROR(unpack(peer, plo, phi));
      lo = lo < plo ? lo : plo;
      hi = lo + 2 * w;
    }
    if (d.takes >= 0) {
      const size_t l = pack(0, owners);
      GW_RETURN_IF_ERROR(c.tp.isend(d.takes, c.tag(last, 0), out, l, sends[0]));
      GW_RETURN_IF_ERROR(c.wait(sends[0]));
    }
  }
  // Every owner's message, decoded in owner order on every rank.
  for (uint64_t j = 0; j < owners; ++j) {
    const uint64_t e = elems(j, j + 1);
    if (e == 0) continue;
    if (len[j] == 0) return Status(Code::kRemote, "no message for segment " + std::to_string(j));
    GW_RETURN_IF_ERROR(timed_decode(c, slots + slot_at[j], len[j], recv + part.start(j), e, DecodeMode::kOverwrite)
                           .with_context("the sum of segment " + std::to_string(j)));
  }
  if (op == ReduceOp::kAvg) {
    for (size_t i = 0; i < n; ++i) recv[i] /= static_cast<float>(p);
  }
  advance_after_call(ef);
  return Status::ok();
}

}  // namespace gw::coll
