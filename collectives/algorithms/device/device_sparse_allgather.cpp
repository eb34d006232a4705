// Sparse all-gather all-reduce on device buffers: sparse_allgather.cpp's
// sparse_allgather_allreduce with the encode and the sum on the device. This rank's message
// is copied down once and sent to every rank; each received message is checked in host
// memory, copied up and added in rank order, so every rank holds the same bits.
#include <string>

#include "collectives/algorithms/device/device_algorithms.hpp"
#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/algorithms/schedules/sparse_allgather_schedule.hpp"

namespace gw::coll {

Status device_sparse_allgather_allreduce(Context& c, DeviceBackend& dev, const float* send, float* recv, size_t n,
                                         ReduceOp op, const Codec& codec, DeviceEfState* ef) {
  const int p = c.size;
  const size_t max_msg = codec.max_encoded_bytes(n, DType::kFloat32);
  const size_t cap = slot_bytes(max_msg);
  // The host algorithm's schedule (pieces of the codec's bound, not of the padded slot).
  const SparseAllgatherSchedule sched = SparseAllgatherSchedule::make(c, max_msg, ef);
  const MessagePieces& mp = sched.pieces;
  const uint32_t pieces = mp.count;
  GW_ASSIGN_OR_RETURN(void* msgs_d, dev.device_scratch(1, static_cast<size_t>(p) * cap));
  GW_ASSIGN_OR_RETURN(uint8_t * msgs_h, dev.host_staging(0, static_cast<size_t>(p) * cap));
  auto* msgs_dev = static_cast<uint8_t*>(msgs_d);
  auto at = [&](int r) { return static_cast<size_t>(r) * cap; };
  transport::Op* sends = c.scratch.sends.get(static_cast<size_t>(p) * pieces);
  transport::Op* recvs = c.scratch.recvs.get(static_cast<size_t>(p) * pieces);
  auto op_of = [&](transport::Op* ops, int r, uint32_t j) -> transport::Op& { return ops[sched.op_index(r, j)]; };
  for (int i = 1; i < p; ++i) {
    const int peer = sched.recv_peer(i);
    for (uint32_t j = 0; j < pieces; ++j) {
      GW_RETURN_IF_ERROR(c.tp.irecv(peer, sched.tag(c, j), msgs_h + at(peer) + mp.offset(j), mp.length(max_msg, j),
                                    op_of(recvs, peer, j)));
    }
  }
  const EncodeContext ctx = sched.encode_context();
  size_t len = 0;
  {
    ScopedSeconds t(c.stats != nullptr ? &c.stats->encode_s : nullptr, "encode");
    if (ef != nullptr) {
      float* acc = ef->residual();
      GW_RETURN_IF_ERROR(dev.add(acc, send, n));
      GW_ASSIGN_OR_RETURN(len, dev.encode_accumulated(codec, acc, n, ctx, msgs_dev + at(c.rank), cap));
    } else {
      GW_ASSIGN_OR_RETURN(len, dev.encode_input(codec, send, n, ctx, msgs_dev + at(c.rank), cap));
    }
  }
  GW_RETURN_IF_ERROR(dev.copy(msgs_h + at(c.rank), msgs_dev + at(c.rank), len));
  GW_ASSIGN_OR_RETURN(DeviceBackend::Fence mine, dev.fence());
  bool mine_sent = false;
  // recv may alias send: it is cleared only after this rank's encode read send (stream order).
  GW_RETURN_IF_ERROR(dev.zero(recv, n * sizeof(float)));

  int next = 0;  // the next rank whose message is added
  while (next < p || !mine_sent) {
    bool any = false;
    if (!mine_sent) {
      GW_ASSIGN_OR_RETURN(bool landed, dev.reached(mine));
      if (landed) {
        GW_ASSIGN_OR_RETURN(len, wire::encoded_length(msgs_h + at(c.rank), len));
        for (uint32_t j = 0; j < pieces; ++j) {
          for (int i = 1; i < p; ++i) {
            const int peer = sched.send_peer(i);
            GW_RETURN_IF_ERROR(c.tp.isend(peer, sched.tag(c, j), msgs_h + at(c.rank) + mp.offset(j), mp.length(len, j),
                                          op_of(sends, peer, j)));
          }
        }
        mine_sent = true;
        any = true;
      }
    }
    while (next < p) {
      ScopedSeconds t(c.stats != nullptr ? &c.stats->decode_s : nullptr, "decode");
      if (next == c.rank) {  // my own message: trusted, its header read once it landed
        if (!mine_sent) break;
        GW_ASSIGN_OR_RETURN(wire::Header h, wire::read_header(msgs_h + at(next), len));
        GW_RETURN_IF_ERROR(dev.apply(h, msgs_dev + at(next), len, recv, DecodeMode::kAccumulate));
      } else {
        bool got = true;
        for (uint32_t j = 0; j < pieces && got; ++j) {
          GW_ASSIGN_OR_RETURN(got, c.ready(op_of(recvs, next, j)));
        }
        if (!got) break;
        GW_ASSIGN_OR_RETURN(const size_t bytes, mp.assembled(&op_of(recvs, next, 0), max_msg, next));
        auto h = validate_staged(msgs_h + at(next), bytes, n);
        if (!h.is_ok()) return h.status().with_context("message of rank " + std::to_string(next));
        GW_RETURN_IF_ERROR(dev.copy(msgs_dev + at(next), msgs_h + at(next), bytes));
        GW_RETURN_IF_ERROR(dev.apply(h.value(), msgs_dev + at(next), bytes, recv, DecodeMode::kAccumulate));
      }
      ++next;
      any = true;
    }
    if (any || c.tp.progress()) continue;
    GW_RETURN_IF_ERROR(idle(c, !mine_sent, "the ranks' messages"));
  }
  if (op == ReduceOp::kAvg) GW_RETURN_IF_ERROR(dev.divide(recv, n, p));
  for (int i = 1; i < p; ++i) {
    for (uint32_t j = 0; j < pieces; ++j) GW_RETURN_IF_ERROR(c.wait(op_of(sends, sched.send_peer(i), j)));
  }
  GW_RETURN_IF_ERROR(drain(c, dev));
  advance_after_call(ef);
  return Status::ok();
}

}  // namespace gw::coll
