// Sparse all-gather all-reduce on device buffers: sparse_allgather.cpp's
// sparse_allgather_allreduce with the encode and the sum on the device. This rank's message
// is copied down once and sent to every rank; each received message is checked in host
// memory, copied up and added in rank order, so every rank holds the same bits.
#include <string>

#include "collectives/algorithms.hpp"
#include "collectives/device_algorithms.hpp"

namespace gw::coll {

Status device_sparse_allgather_allreduce(Context& c, DeviceBackend& dev, const float* send, float* recv, size_t n,
                                         ReduceOp op, const Codec& codec, DeviceEfState* ef) {
  const uint64_t base_step = ef != nullptr ? ef->step() : c.seq;
  const int p = c.size;
  const size_t cap = slot_bytes(codec.max_encoded_bytes(n, DType::kFloat32));
  GW_ASSIGN_OR_RETURN(void* msgs_d, dev.device_scratch(1, static_cast<size_t>(p) * cap));
  GW_ASSIGN_OR_RETURN(uint8_t* msgs_h, dev.host_staging(0, static_cast<size_t>(p) * cap));
  auto* msgs_dev = static_cast<uint8_t*>(msgs_d);
  auto at = [&](int r) { return static_cast<size_t>(r) * cap; };
  transport::Op* sends = c.scratch.sends.get(static_cast<size_t>(p));
  transport::Op* recvs = c.scratch.recvs.get(static_cast<size_t>(p));
  for (int i = 1; i < p; ++i) {
    const int peer = c.wrap(c.rank - i);
    GW_RETURN_IF_ERROR(c.tp.irecv(peer, c.tag(0, 0), msgs_h + at(peer), cap, recvs[peer]));
  }
  const EncodeContext ctx{base_step, static_cast<uint32_t>(c.rank)};
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
        for (int i = 1; i < p; ++i) {
          const int peer = c.wrap(c.rank + i);  // staggered, so that no rank is everyone's first
          GW_RETURN_IF_ERROR(c.tp.isend(peer, c.tag(0, 0), msgs_h + at(c.rank), len, sends[peer]));
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
        transport::Op& r = recvs[next];
        GW_ASSIGN_OR_RETURN(const bool got, c.ready(r));
        if (!got) break;
        auto h = validate_staged(msgs_h + at(next), r.bytes, n);
        if (!h.is_ok()) return h.status().with_context("message of rank " + std::to_string(next));
        GW_RETURN_IF_ERROR(dev.copy(msgs_dev + at(next), msgs_h + at(next), r.bytes));
        GW_RETURN_IF_ERROR(dev.apply(h.value(), msgs_dev + at(next), r.bytes, recv, DecodeMode::kAccumulate));
      }
      ++next;
      any = true;
    }
    if (any || c.tp.progress()) continue;
    GW_RETURN_IF_ERROR(idle(c, !mine_sent, "the ranks' messages"));
  }
  if (op == ReduceOp::kAvg) GW_RETURN_IF_ERROR(dev.divide(recv, n, p));
  for (int i = 1; i < p; ++i) GW_RETURN_IF_ERROR(c.wait(sends[c.wrap(c.rank + i)]));
  GW_RETURN_IF_ERROR(drain(c, dev));
  if (ef != nullptr) ef->advance();
  return Status::ok();
}

}  // namespace gw::coll
