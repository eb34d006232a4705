// Sparse recursive doubling (SparCML's sparse all-reduce, SC'19): the exact sum of every
// rank's sparse message (top-k, dgc, random-k), as the sparse all-gather computes it, in
// log p exchanges instead of p - 1 messages per rank. Each rank encodes its gradient once;
// partners then swap what they hold and merge it: the union of their indices, each common
// index summed. A merged message goes on as index/value pairs while those take fewer bytes
// than a dense buffer, and as a dense message from the step where the union is denser: what
// a dense exchange would cost caps every step, and nothing is re-compressed on the way.
//
// The schedule is doubling.hpp's (the e folded ranks hand their message in at step 0 and get
// the sum back at step m + 1). When the call is checked, every message carries this rank's
// call descriptor at its head, as recursive doubling's do.
//
// Partners merge lower rank's operand first, so both get the same bits, and every rank ends
// with the same result. Error feedback is the sender's alone, as in the sparse all-gather:
// the residual keeps what the rank's message left out.
#include <cstring>
#include <string>

#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/algorithms/schedules/ef_rules.hpp"
#include "collectives/checks/call_descriptor.hpp"
#include "collectives/common/doubling.hpp"
#include "compressors/sparse_entries.hpp"

namespace gw::coll {

Status sparse_doubling_allreduce(Context& c, const float* send, float* recv, size_t n, ReduceOp op, Codec& codec,
                                 ErrorFeedback* ef) {
  if (n == 0) {  // no data moves (the check graph is the ring edge alone)
    advance_after_call(ef);
    return Status::ok();
  }
  const int p = c.size;
  const Doubling d(c.rank, p);
  const size_t cap = codec.max_encoded_bytes(n, DType::kFloat32);
  const size_t msg_cap = detail::max_entries_message_bytes(n);
  const size_t head = c.carried_len();
  uint8_t* own = c.scratch.bytes.get<uint8_t>(0, cap);
  // This rank's current sum and the next one, each [descriptor][message].
  uint8_t* cur = c.scratch.bytes.get<uint8_t>(1, head + msg_cap);
  uint8_t* nxt = c.scratch.bytes.get<uint8_t>(2, head + msg_cap);
  const size_t in_cap = (c.check != nullptr ? CallDescriptor::kMaxBytes : 0) + msg_cap;
  uint8_t* in = c.scratch.bytes.get<uint8_t>(3, in_cap);
  if (head > 0) {
    std::memcpy(cur, c.carried_bytes(), head);
    std::memcpy(nxt, c.carried_bytes(), head);
  }
  transport::Op* sends = c.scratch.sends.get(1);
  transport::Op* recvs = c.scratch.recvs.get(1);

  const EncodeContext ctx{call_stream_step(c, ef), static_cast<uint32_t>(c.rank)};
  size_t len = 0;
  if (ef != nullptr) {
    GW_ASSIGN_OR_RETURN(len, timed_encode_adding(c, codec, ef->residual(), send, n, ctx, own, cap));
  } else {
    GW_ASSIGN_OR_RETURN(len, timed_encode_input(c, codec, send, n, ctx, own, cap));
  }
  size_t cur_len = 0;
  {
    GW_ASSIGN_OR_RETURN(detail::EntryView mine, detail::view_entries(own, len, n));
    cur_len = detail::rewrite_entries(mine, cur + head);
  }

  // Where even p whole messages of k entries, disjoint, would be sent as pairs, the sum
  // comes out sparse: the output is zeroed while the first message is on its way (send has
  // been encoded by then, and may be the same buffer).
  const uint64_t kept = codec.spec().k_for(n);
  const bool sparse_sum =
      kept <= n / static_cast<uint64_t>(p) && detail::pairs_smaller(n, kept * static_cast<uint64_t>(p));
  bool zeroed = false;
  auto zero_output = [&] {
    if (!sparse_sum || zeroed) return;
    std::memset(recv, 0, n * sizeof(float));
    zeroed = true;
  };

  detail::EntryView theirs;
  // Waits for the message from peer, judges its descriptor and reads it (untrusted).
  auto take = [&](int peer, uint32_t step) -> Status {
    zero_output();
    GW_RETURN_IF_ERROR(c.wait(recvs[0]));
    size_t at = 0;
    GW_RETURN_IF_ERROR(c.take_carried(peer, in, recvs[0].bytes, &at));
    auto v = detail::view_entries(in + at, recvs[0].bytes - at, n);
    if (!v.is_ok()) {
      return v.status().with_context("sparse-doubling message from rank " + std::to_string(peer) + " at step " +
                                     std::to_string(step));
    }
    theirs = v.value();
    return Status::ok();
  };
  // cur = lower rank's sum + higher rank's (cur is this rank's own writing: not validated again).
  auto merge = [&](int peer) {
    const detail::EntryView mine = detail::view_written(cur + head, n);
    const size_t l = peer < c.rank ? detail::merge_entries(theirs, mine, nxt + head)
                                   : detail::merge_entries(mine, theirs, nxt + head);
    std::swap(cur, nxt);
    cur_len = l;
  };
  const uint32_t last = static_cast<uint32_t>(d.m) + 1;

  if (d.folded >= 0) {
    GW_RETURN_IF_ERROR(c.tp.irecv(d.folded, c.tag(last, 0), in, in_cap, recvs[0]));
    GW_RETURN_IF_ERROR(c.tp.isend(d.folded, c.tag(0, 0), cur, head + cur_len, sends[0]));
    GW_RETURN_IF_ERROR(take(d.folded, last));
    GW_RETURN_IF_ERROR(c.wait(sends[0]));
    detail::expand_entries(theirs, recv, zeroed);
  } else {
    if (d.takes >= 0) {
      GW_RETURN_IF_ERROR(c.tp.irecv(d.takes, c.tag(0, 0), in, in_cap, recvs[0]));
      GW_RETURN_IF_ERROR(take(d.takes, 0));
      merge(d.takes);
    }
    for (int k = 0; k < d.m; ++k) {
      const int peer = d.partner(k);
      const auto step = static_cast<uint32_t>(k) + 1;
      GW_RETURN_IF_ERROR(c.tp.irecv(peer, c.tag(step, 0), in, in_cap, recvs[0]));
      GW_RETURN_IF_ERROR(c.tp.isend(peer, c.tag(step, 0), cur, head + cur_len, sends[0]));
      GW_RETURN_IF_ERROR(take(peer, step));
      GW_RETURN_IF_ERROR(c.wait(sends[0]));  // cur is rewritten by the merge
      merge(peer);
    }
    if (d.takes >= 0) {
      GW_RETURN_IF_ERROR(c.tp.isend(d.takes, c.tag(last, 0), cur, head + cur_len, sends[0]));
    }
    detail::expand_entries(detail::view_written(cur + head, n), recv, zeroed);
    if (d.takes >= 0) GW_RETURN_IF_ERROR(c.wait(sends[0]));
  }
  if (op == ReduceOp::kAvg) {
    for (size_t i = 0; i < n; ++i) recv[i] /= static_cast<float>(p);
  }
  advance_after_call(ef);
  return Status::ok();
}

}  // namespace gw::coll
