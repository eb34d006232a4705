// Compressed scatter-reduce: every rank encodes each segment once and sends it straight to
// the segment's owner (an all-to-all); the owner sums the p contributions, encodes the sum
// once with owner-side error feedback, and sends that message to every rank. Two
// compressions per element, whatever p is (a ring makes p).
#include <cstring>

#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/algorithms/schedules/scatter_reduce_schedule.hpp"

namespace gw::coll {

Status scatter_reduce_allreduce(Context& c, const float* send, float* recv, size_t n, ReduceOp op, Codec& codec,
                                ErrorFeedback* ef) {
  using S = ScatterReduceSchedule;
  const int p = c.size;
  const S sched = S::make(c, n, ef);
  const uint64_t own_start = sched.own_start();
  const uint64_t own_len = sched.own_len();
  // With error feedback every segment is encoded from the residual (which keeps the loss);
  // without, foreign segments are encoded straight from send and only my segment, which
  // receives the others' contributions, is copied.
  float* acc = nullptr;
  if (ef != nullptr) {
    acc = prepare_accumulator(c, send, n, ef, 0);
  } else {
    acc = c.scratch.bytes.get<float>(0, n);
    if (own_len > 0) std::memcpy(acc + own_start, send + own_start, own_len * sizeof(float));
  }
  const Chunking& chunks = sched.chunks;
  const uint32_t max_chunks = sched.max_chunks;
  const size_t max_msg = codec.max_encoded_bytes(chunks.elems, DType::kFloat32);
  const size_t per_phase = sched.per_phase();  // (peer, chunk) slots
  auto slot = [&](int peer, uint32_t k) { return sched.slot(peer, k); };

  uint8_t* out_msgs = c.scratch.bytes.get<uint8_t>(1, per_phase * max_msg);     // to owners
  uint8_t* in_msgs = c.scratch.bytes.get<uint8_t>(2, 2 * per_phase * max_msg);  // both phases
  transport::Op* sends = c.scratch.sends.get(2 * per_phase);
  transport::Op* recvs = c.scratch.recvs.get(2 * per_phase);
  float* owner_res = ef != nullptr ? ef->owner_residual(own_len) : c.scratch.bytes.get<float>(4, own_len);
  if (ef == nullptr && own_len > 0) std::memset(owner_res, 0, own_len * sizeof(float));
  uint8_t* own_msgs = c.scratch.bytes.get<uint8_t>(3, static_cast<size_t>(max_chunks) * max_msg);

  auto seg_chunks = [&](int seg) { return sched.seg_chunks(seg); };
  auto seg_chunk_len = [&](int seg, uint32_t k) { return sched.chunk_len(seg, k); };
  auto in_msg = [&](int phase, int peer, uint32_t k) {
    return in_msgs + (static_cast<size_t>(phase) * per_phase + slot(peer, k)) * max_msg;
  };

  // Phase 0: contributions to my segment; phase 1: every owner's final message.
  for (int peer = 0; peer < p; ++peer) {
    if (peer == c.rank) continue;
    for (uint32_t k = 0; k < seg_chunks(c.rank); ++k) {
      GW_RETURN_IF_ERROR(c.tp.irecv(peer, sched.tag(c, S::kContribute, k), in_msg(S::kContribute, peer, k), max_msg,
                                    recvs[slot(peer, k)]));
    }
    for (uint32_t k = 0; k < seg_chunks(peer); ++k) {
      GW_RETURN_IF_ERROR(c.tp.irecv(peer, sched.tag(c, S::kResult, k), in_msg(S::kResult, peer, k), max_msg,
                                    recvs[per_phase + slot(peer, k)]));
    }
  }
  // Reduce my segment's chunk k: the p contributions in rank order (the same sum on every
  // run), encoded once and sent to everyone.
  auto reduce_own = [&](uint32_t k) -> Status {
    const uint64_t len = seg_chunk_len(c.rank, k);
    float* sum = acc + own_start + chunks.offset(k);
    float* ores = owner_res + chunks.offset(k);
    for (int peer = 0; peer < p; ++peer) {
      if (peer == c.rank) continue;
      transport::Op& r = recvs[slot(peer, k)];
      GW_RETURN_IF_ERROR(c.wait(r));
      GW_RETURN_IF_ERROR(timed_decode(c, in_msg(S::kContribute, peer, k), r.bytes, sum, len, DecodeMode::kAccumulate)
                             .with_context("contribution from rank " + std::to_string(peer)));
    }
    // The owner residual is in output units (after averaging); my own contribution is
    // entirely in the sum, so my residual for this chunk is zero.
    for (uint64_t i = 0; i < len; ++i) {
      ores[i] += op == ReduceOp::kAvg ? sum[i] / static_cast<float>(p) : sum[i];
      sum[i] = 0.0f;
    }
    uint8_t* msg = own_msgs + static_cast<size_t>(k) * max_msg;
    const EncodeContext ctx = sched.encode_context(S::kResult, k);
    GW_ASSIGN_OR_RETURN(size_t mlen, timed_encode(c, codec, ores, len, ctx, msg, max_msg));
    for (int i = 1; i < p; ++i) {  // out first: my own copy can be decoded while they travel
      const int peer = sched.send_peer(i);
      GW_RETURN_IF_ERROR(c.tp.isend(peer, sched.tag(c, S::kResult, k), msg, mlen, sends[per_phase + slot(peer, k)]));
    }
    c.tp.progress();
    return timed_decode(c, msg, mlen, recv + own_start + chunks.offset(k), len, DecodeMode::kOverwrite);
  };
  // Every other owner's reduced chunk is decoded into place as soon as it is here, in each
  // owner's chunk order (each lands in its own place, so the order changes nothing but how
  // long the tail is): decoding interleaves with this rank's own encoding and reducing
  // instead of waiting for them to end.
  uint32_t* next_result = c.scratch.bytes.get<uint32_t>(5, static_cast<size_t>(p));  // per owner
  std::memset(next_result, 0, static_cast<size_t>(p) * sizeof(uint32_t));
  size_t left = 0;
  for (int peer = 0; peer < p; ++peer) left += peer == c.rank ? 0 : seg_chunks(peer);
  uint32_t next_own = 0;
  auto contributions_arrived = [&](uint32_t k) {
    for (int peer = 0; peer < p; ++peer) {
      if (peer != c.rank && !recvs[slot(peer, k)].finished()) return false;
    }
    return true;
  };
  // Whatever can be done without waiting: reduce my chunks whose contributions are all here
  // (their results go out at once), then decode the results that have arrived.
  auto drain_ready = [&](bool reduce) -> Result<bool> {
    bool any = false;
    while (reduce && next_own < seg_chunks(c.rank) && contributions_arrived(next_own)) {
      GW_RETURN_IF_ERROR(reduce_own(next_own++));
      any = true;
    }
    for (int i = 1; i < p; ++i) {
      const int peer = sched.send_peer(i);
      while (next_result[peer] < seg_chunks(peer)) {
        const uint32_t k = next_result[peer];
        transport::Op& r = recvs[per_phase + slot(peer, k)];
        GW_ASSIGN_OR_RETURN(const bool got, c.ready(r));
        if (!got) break;
        GW_RETURN_IF_ERROR(timed_decode(c, in_msg(S::kResult, peer, k), r.bytes, recv + sched.chunk_start(peer, k),
                                        seg_chunk_len(peer, k), DecodeMode::kOverwrite)
                               .with_context("result from rank " + std::to_string(peer)));
        ++next_result[peer];
        --left;
        any = true;
      }
    }
    return any;
  };
  // Encode each foreign segment once (with EF in place: the loss stays as residual) and send
  // it, chunk by chunk across the owners, so that every owner soon holds a complete first
  // chunk; between chunks, do what has become ready, so that the second phase starts early
  // and the links never wait for this loop to end.
  for (uint32_t k = 0; k < max_chunks; ++k) {
    for (int i = 1; i < p; ++i) {
      const int owner = sched.send_peer(i);
      if (k >= seg_chunks(owner)) continue;
      uint8_t* msg = out_msgs + slot(owner, k) * max_msg;
      const EncodeContext ctx = sched.encode_context(S::kContribute, k);
      const uint64_t off = sched.chunk_start(owner, k);
      GW_ASSIGN_OR_RETURN(size_t len,
                          ef != nullptr
                              ? timed_encode(c, codec, acc + off, seg_chunk_len(owner, k), ctx, msg, max_msg)
                              : timed_encode_input(c, codec, send + off, seg_chunk_len(owner, k), ctx, msg, max_msg));
      GW_RETURN_IF_ERROR(c.tp.isend(owner, sched.tag(c, S::kContribute, k), msg, len, sends[slot(owner, k)]));
      c.tp.progress();  // let the transport move what is posted while the next chunk encodes
    }
    GW_RETURN_IF_ERROR(drain_ready(false).status());
  }
  while (next_own < seg_chunks(c.rank) || left > 0) {
    GW_ASSIGN_OR_RETURN(const bool any, drain_ready(true));
    if (any || c.tp.progress()) continue;
    GW_RETURN_IF_ERROR(c.idle(
        next_own < seg_chunks(c.rank) ? "contributions to this rank's segment" : "the reduced segments", c.deadline));
  }
  GW_RETURN_IF_ERROR(c.wait_all(sends, 2 * per_phase));
  advance_after_call(ef);
  return Status::ok();
}

}  // namespace gw::coll
