// Compressed ring all-reduce. Reduce-scatter: at every hop a rank decodes the partial sum it
// received, adds it to its own chunk and re-encodes (the loss of each encode stays in the
// accumulator, which is the EF residual when there is one). The owner of a segment then
// encodes the full sum once, with owner-side error feedback, and the all-gather forwards
// those bytes unchanged, so every rank decodes the same message into the same result.
#include <cstring>

#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/algorithms/schedules/ef_rules.hpp"
#include "collectives/common/message_step.hpp"

namespace gw::coll {

Status compressed_ring_allreduce(Context& c, const float* send, float* recv, size_t n, ReduceOp op, Codec& codec,
                                 ErrorFeedback* ef) {
  const int p = c.size;
  const uint64_t base_step = call_stream_step(c, ef);
  float* acc = prepare_accumulator(c, send, n, ef, 0);
  const Partition part{n, static_cast<uint64_t>(p)};
  const Chunking chunks = Chunking::for_segment(part.length(0), c.chunk_bytes, sizeof(float));
  const uint32_t max_chunks = chunks.count(part.length(0));
  const size_t max_msg = codec.max_encoded_bytes(chunks.elems, DType::kFloat32);
  const int rs_steps = p - 1;
  const int steps = 2 * (p - 1);
  const int own = static_cast<int>(owner_segment(Algo::kCompressedRing, c.rank, p));
  auto send_seg = [&](int s) { return s < rs_steps ? c.wrap(c.rank - s) : c.wrap(c.rank + 1 - (s - rs_steps)); };
  auto recv_seg = [&](int s) { return s < rs_steps ? c.wrap(c.rank - s - 1) : c.wrap(c.rank - (s - rs_steps)); };

  // Message slabs, one per (step, chunk); all-gather sends forward the previous step's
  // received message, and the first all-gather step sends the owner's message.
  const size_t slots = static_cast<size_t>(steps + 1) * max_chunks;
  uint8_t* send_msgs = c.scratch.bytes.get<uint8_t>(1, slots * max_msg);
  uint8_t* recv_msgs = c.scratch.bytes.get<uint8_t>(2, slots * max_msg);
  transport::Op* sends = c.scratch.sends.get(static_cast<size_t>(steps) * max_chunks);
  transport::Op* recvs = c.scratch.recvs.get(static_cast<size_t>(steps) * max_chunks);
  auto slot = [&](int s, uint32_t k) { return static_cast<size_t>(s) * max_chunks + k; };
  size_t* send_len = c.scratch.bytes.get<size_t>(3, slots);

  const uint64_t own_len = part.length(static_cast<uint64_t>(own));
  float* owner_res = ef != nullptr ? ef->owner_residual(own_len) : c.scratch.bytes.get<float>(4, own_len);
  if (ef == nullptr && own_len > 0) std::memset(owner_res, 0, own_len * sizeof(float));

  auto chunk_ptr = [&](float* base, int seg, uint32_t k) {
    return base + part.start(static_cast<uint64_t>(seg)) + chunks.offset(k);
  };
  auto chunk_len = [&](int seg, uint32_t k) { return chunks.length(part.length(static_cast<uint64_t>(seg)), k); };
  auto nchunks = [&](int seg) { return chunks.count(part.length(static_cast<uint64_t>(seg))); };

  // Encodes acc's chunk (in place: what is lost stays) and sends it as step s.
  auto encode_and_send = [&](int s, uint32_t k) -> Status {
    const int seg = send_seg(s);
    uint8_t* msg = send_msgs + slot(s, k) * max_msg;
    const EncodeContext ctx{message_step(base_step, static_cast<uint32_t>(s), k), static_cast<uint32_t>(c.rank)};
    GW_ASSIGN_OR_RETURN(size_t len,
                        timed_encode(c, codec, chunk_ptr(acc, seg, k), chunk_len(seg, k), ctx, msg, max_msg));
    send_len[slot(s, k)] = len;
    return c.tp.isend(c.next(), c.tag(static_cast<uint32_t>(s), k), msg, len, sends[slot(s, k)]);
  };
  // The owner's final encode of its fully reduced chunk, with owner-side error feedback.
  auto finish_owned_chunk = [&](uint32_t k) -> Status {
    float* sum = chunk_ptr(acc, own, k);
    const uint64_t len = chunk_len(own, k);
    float* ores = owner_res + chunks.offset(k);
    for (uint64_t i = 0; i < len; ++i) {
      ores[i] += op == ReduceOp::kAvg ? sum[i] / static_cast<float>(p) : sum[i];
      sum[i] = 0.0f;  // this rank's own contribution is fully in the sum: no residual
    }
    uint8_t* msg = send_msgs + slot(rs_steps, k) * max_msg;
    const EncodeContext ctx{message_step(base_step, static_cast<uint32_t>(rs_steps), k), static_cast<uint32_t>(c.rank)};
    GW_ASSIGN_OR_RETURN(size_t mlen, timed_encode(c, codec, ores, len, ctx, msg, max_msg));
    send_len[slot(rs_steps, k)] = mlen;
    GW_RETURN_IF_ERROR(timed_decode(c, msg, mlen, chunk_ptr(recv, own, k), len, DecodeMode::kOverwrite));
    if (p > 1)
      return c.tp.isend(c.next(), c.tag(static_cast<uint32_t>(rs_steps), k), msg, mlen, sends[slot(rs_steps, k)]);
    return Status::ok();
  };
  auto post_recvs = [&](int s) -> Status {
    const int seg = recv_seg(s);
    for (uint32_t k = 0; k < nchunks(seg); ++k) {
      GW_RETURN_IF_ERROR(c.tp.irecv(c.prev(), c.tag(static_cast<uint32_t>(s), k), recv_msgs + slot(s, k) * max_msg,
                                    max_msg, recvs[slot(s, k)]));
    }
    return Status::ok();
  };

  if (p == 1) {
    for (uint32_t k = 0; k < nchunks(own); ++k) GW_RETURN_IF_ERROR(finish_owned_chunk(k));
    advance_after_call(ef);
    return Status::ok();
  }
  GW_RETURN_IF_ERROR(post_recvs(0));
  for (uint32_t k = 0; k < nchunks(send_seg(0)); ++k) GW_RETURN_IF_ERROR(encode_and_send(0, k));
  for (int s = 0; s < steps; ++s) {
    if (s + 1 < steps) GW_RETURN_IF_ERROR(post_recvs(s + 1));
    const int seg = recv_seg(s);
    for (uint32_t k = 0; k < nchunks(seg); ++k) {
      transport::Op& r = recvs[slot(s, k)];
      GW_RETURN_IF_ERROR(c.wait(r));
      const uint8_t* msg = recv_msgs + slot(s, k) * max_msg;
      if (s < rs_steps) {
        GW_RETURN_IF_ERROR(
            timed_decode(c, msg, r.bytes, chunk_ptr(acc, seg, k), chunk_len(seg, k), DecodeMode::kAccumulate)
                .with_context("ring step " + std::to_string(s)));
        if (s + 1 < rs_steps) {
          GW_RETURN_IF_ERROR(encode_and_send(s + 1, k));
        } else {
          GW_RETURN_IF_ERROR(finish_owned_chunk(k));
        }
      } else {
        GW_RETURN_IF_ERROR(
            timed_decode(c, msg, r.bytes, chunk_ptr(recv, seg, k), chunk_len(seg, k), DecodeMode::kOverwrite)
                .with_context("ring step " + std::to_string(s)));
        if (s + 1 < steps) {
          GW_RETURN_IF_ERROR(
              c.tp.isend(c.next(), c.tag(static_cast<uint32_t>(s + 1), k), msg, r.bytes, sends[slot(s + 1, k)]));
        }
      }
    }
  }
  GW_RETURN_IF_ERROR(c.wait_all(sends, static_cast<size_t>(steps) * max_chunks));
  advance_after_call(ef);
  return Status::ok();
}

}  // namespace gw::coll
