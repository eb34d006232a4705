// Dense recursive-doubling all-reduce, for small buffers: ceil(log2 p) exchanges of the whole
// buffer (plus two when p is not a power of two) instead of the ring's 2 (p - 1) steps of
// p-th parts, so its latency grows with log p, not p.
//
// The schedule is doubling.hpp's. When the call is checked, every message carries this
// rank's call descriptor at its head (the check judges the partners' from there: no
// descriptor messages of their own on these edges).
//
// Every exchange reduces lower-rank operand op higher-rank operand on both sides, so partners
// compute the same expression on the same bits: every rank ends with the same result, NaN
// payloads and signed zeros included (x86 keeps the first operand's NaN payload).
#include <cstring>
#include <string>

#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/checks/call_descriptor.hpp"
#include "collectives/common/doubling.hpp"
#include "collectives/common/reduce.hpp"

namespace gw::coll {
Status recursive_doubling_allreduce(Context& c, const void* send, void* recv, size_t n, DType dtype, ReduceOp op) {
  const size_t es = dtype_size(dtype);
  const size_t bytes = n * es;
  if (send != recv && n > 0) std::memmove(recv, send, bytes);
  const int p = c.size;
  if (p == 1 || n == 0) return Status::ok();

  auto* data = static_cast<uint8_t*>(recv);
  // Messages are [this rank's descriptor][data]; a partner's may carry a descriptor of
  // another length (a mismatched call), so receives take up to the longest one.
  const size_t head = c.carried_len();
  const size_t cap = (c.check != nullptr ? CallDescriptor::kMaxBytes : 0) + bytes;
  uint8_t* in = c.scratch.bytes.get<uint8_t>(0, cap);
  uint8_t* out = c.scratch.bytes.get<uint8_t>(1, head + bytes);
  if (head > 0) std::memcpy(out, c.carried_bytes(), head);
  transport::Op* sends = c.scratch.sends.get(1);
  transport::Op* recvs = c.scratch.recvs.get(1);
  const Doubling d(c.rank, p);
  const uint8_t* theirs = nullptr;  // the data of the message just received

  auto post_send = [&](int peer, uint32_t step) -> Status {
    std::memcpy(out + head, data, bytes);
    return c.tp.isend(peer, c.tag(step, 0), out, head + bytes, sends[0]);
  };
  // Waits for the message from peer, judges its descriptor and checks its length.
  auto take = [&](int peer, uint32_t step) -> Status {
    GW_RETURN_IF_ERROR(c.wait(recvs[0]));
    size_t at = 0;
    GW_RETURN_IF_ERROR(c.take_carried(peer, in, recvs[0].bytes, &at));
    theirs = in + at;
    if (recvs[0].bytes - at == bytes) return Status::ok();
    return Status(Code::kRemote, "rank " + std::to_string(peer) + " sent " + std::to_string(recvs[0].bytes - at) +
                                     " bytes at recursive-doubling step " + std::to_string(step) + ", expected " +
                                     std::to_string(bytes));
  };
  // data = lower rank's operand op higher rank's.
  auto combine = [&](int peer) {
    if (peer > c.rank) {
      reduce_into(data, theirs, n, dtype, op);
    } else {
      auto* mine_first = const_cast<uint8_t*>(theirs);  // in scratch: ours to overwrite
      reduce_into(mine_first, data, n, dtype, op);
      std::memcpy(data, mine_first, bytes);
    }
  };
  const uint32_t last = static_cast<uint32_t>(d.m) + 1;

  if (d.folded >= 0) {
    GW_RETURN_IF_ERROR(c.tp.irecv(d.folded, c.tag(last, 0), in, cap, recvs[0]));
    GW_RETURN_IF_ERROR(post_send(d.folded, 0));
    GW_RETURN_IF_ERROR(take(d.folded, last));
    std::memcpy(data, theirs, bytes);
    return c.wait(sends[0]);
  }
  if (d.takes >= 0) {
    GW_RETURN_IF_ERROR(c.tp.irecv(d.takes, c.tag(0, 0), in, cap, recvs[0]));
    GW_RETURN_IF_ERROR(take(d.takes, 0));
    combine(d.takes);
  }
  for (int k = 0; k < d.m; ++k) {
    const int peer = d.partner(k);
    const auto step = static_cast<uint32_t>(k) + 1;
    GW_RETURN_IF_ERROR(c.tp.irecv(peer, c.tag(step, 0), in, cap, recvs[0]));
    GW_RETURN_IF_ERROR(post_send(peer, step));
    GW_RETURN_IF_ERROR(take(peer, step));
    GW_RETURN_IF_ERROR(c.wait(sends[0]));  // out is rewritten by the next step
    combine(peer);
  }
  if (op == ReduceOp::kAvg) divide(data, n, dtype, p);
  if (d.takes >= 0) {
    GW_RETURN_IF_ERROR(post_send(d.takes, last));
    GW_RETURN_IF_ERROR(c.wait(sends[0]));
  }
  return Status::ok();
}

}  // namespace gw::coll
