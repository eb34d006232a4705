// Sparse all-gather: messages of different sizes from every rank to every rank. Lengths go
// first (a fixed-size all-gather of one u64 each), then the messages: around the ring for
// the raw gather, straight to every rank for the dense form, which decodes every message,
// in rank order, into one sum, so all ranks agree to the bit. Sparse all-reduce encodes
// this rank's gradient and does the same without the lengths (the codec bounds them).
#include <algorithm>
#include <cstring>
#include <string>

#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/algorithms/host/allgatherv.hpp"
#include "collectives/algorithms/schedules/sparse_allgather_schedule.hpp"
#include "collectives/common/message_pieces.hpp"
#include "collectives/common/step_ranges.hpp"

namespace gw::coll {

Result<uint64_t> gather_layout(Context& c, size_t len, uint64_t* offsets, uint64_t* lengths) {
  const uint64_t mine = len;
  Context lengths_phase = c;  // its own tag range: the messages follow on the same ring
  lengths_phase.step_base = kGatherLengthSteps.base;
  GW_RETURN_IF_ERROR(allgather(lengths_phase, &mine, lengths, sizeof(uint64_t)));
  uint64_t total = 0;
  for (int r = 0; r < c.size; ++r) {
    offsets[r] = total;
    if (__builtin_add_overflow(total, lengths[r], &total)) {
      return Status(Code::kRemote, "message lengths from the ranks overflow");
    }
  }
  return total;
}

Status check_messages_total(uint64_t total, size_t n, int nranks) {
  // Each message is at most as large as a dense one, with header: bounds what a peer can
  // make us allocate.
  const uint64_t limit = static_cast<uint64_t>(nranks) * (n * sizeof(float) + 4096);
  if (total <= limit) return Status::ok();
  return Status(Code::kRemote, "the ranks' messages total " + std::to_string(total) +
                                   " bytes, more than any codec needs for " + std::to_string(n) + " elements");
}

Status sparse_allgather(Context& c, const void* msg, size_t len, void* out, size_t capacity, size_t* lengths_out,
                        bool* fits) {
  auto* offsets = c.scratch.bytes.get<uint64_t>(4, static_cast<size_t>(c.size));
  auto* lengths = c.scratch.bytes.get<uint64_t>(5, static_cast<size_t>(c.size));
  GW_ASSIGN_OR_RETURN(uint64_t total, gather_layout(c, len, offsets, lengths));
  // Too small an output on this rank: the others cannot know, so the gather still runs (into
  // scratch) and the caller learns the lengths it needs; nobody is left waiting.
  *fits = total <= capacity;
  auto* data = *fits ? static_cast<uint8_t*>(out) : c.scratch.bytes.get<uint8_t>(3, total);
  if (len > 0) std::memmove(data + offsets[c.rank], msg, len);
  GW_RETURN_IF_ERROR(ring_allgatherv(c, data, offsets, lengths));
  for (int r = 0; r < c.size; ++r) lengths_out[r] = lengths[r];
  return Status::ok();
}

Status sparse_allgather_dense(Context& c, const void* msg, size_t len, float* dense, size_t n) {
  auto* offsets = c.scratch.bytes.get<uint64_t>(4, static_cast<size_t>(c.size));
  auto* lengths = c.scratch.bytes.get<uint64_t>(5, static_cast<size_t>(c.size));
  GW_ASSIGN_OR_RETURN(uint64_t total, gather_layout(c, len, offsets, lengths));
  GW_RETURN_IF_ERROR(check_messages_total(total, n, c.size));
  auto* data = c.scratch.bytes.get<uint8_t>(3, total);
  // Every message goes straight to every rank rather than around the ring (the same bytes
  // leave each rank, but nothing waits to be forwarded), and is decoded as soon as the
  // rank order allows, while later ones are still arriving. Rank order keeps every rank's
  // sum the same to the bit.
  const int p = c.size;
  transport::Op* sends = c.scratch.sends.get(static_cast<size_t>(p));
  transport::Op* recvs = c.scratch.recvs.get(static_cast<size_t>(p));
  for (int i = 1; i < p; ++i) {
    const int peer = c.wrap(c.rank - i);
    GW_RETURN_IF_ERROR(c.tp.irecv(peer, c.tag(0, 0), data + offsets[peer], lengths[peer], recvs[peer]));
  }
  for (int i = 1; i < p; ++i) {
    const int peer = c.wrap(c.rank + i);  // staggered, so that no rank is everyone's first
    GW_RETURN_IF_ERROR(c.tp.isend(peer, c.tag(0, 0), msg, len, sends[peer]));
  }
  if (n > 0) std::memset(dense, 0, n * sizeof(float));
  for (int r = 0; r < p; ++r) {
    const uint8_t* m = static_cast<const uint8_t*>(msg);
    if (r != c.rank) {
      GW_RETURN_IF_ERROR(c.wait(recvs[r]));
      if (recvs[r].bytes != lengths[r]) {
        return Status(Code::kRemote, "rank " + std::to_string(r) + " sent " + std::to_string(recvs[r].bytes) +
                                         " bytes, announced " + std::to_string(lengths[r]));
      }
      m = data + offsets[r];
    }
    GW_RETURN_IF_ERROR(timed_decode(c, m, lengths[r], dense, n, DecodeMode::kAccumulate)
                           .with_context("message of rank " + std::to_string(r)));
    c.tp.progress();
  }
  for (int i = 1; i < p; ++i) GW_RETURN_IF_ERROR(c.wait(sends[c.wrap(c.rank + i)]));
  return Status::ok();
}

Status sparse_allgather_exchange(Context& c, const float* send, size_t n, Codec& codec, ErrorFeedback* ef,
                                 uint8_t* msgs, size_t cap, uint64_t* lengths,
                                 const std::function<Status(int)>& on_message) {
  const int p = c.size;
  // Every rank encodes with the same codec and count, so no message exceeds cap: the
  // receives are posted before this rank encodes, with no length exchange, and each rank's
  // message leaves as soon as that rank has encoded it. Slot r holds rank r's message.
  // It travels as pieces (message_pieces.hpp).
  const SparseAllgatherSchedule sched = SparseAllgatherSchedule::make(c, cap, ef);
  const MessagePieces& mp = sched.pieces;
  const uint32_t pieces = mp.count;
  transport::Op* sends = c.scratch.sends.get(static_cast<size_t>(p) * pieces);
  transport::Op* recvs = c.scratch.recvs.get(static_cast<size_t>(p) * pieces);
  auto slot = [&](int r) { return msgs + static_cast<size_t>(r) * cap; };
  auto op_of = [&](transport::Op* ops, int r, uint32_t j) -> transport::Op& { return ops[sched.op_index(r, j)]; };
  for (int i = 1; i < p; ++i) {
    const int peer = sched.recv_peer(i);
    for (uint32_t j = 0; j < pieces; ++j) {
      GW_RETURN_IF_ERROR(
          c.tp.irecv(peer, sched.tag(c, j), slot(peer) + mp.offset(j), mp.length(cap, j), op_of(recvs, peer, j)));
    }
  }
  const EncodeContext ctx = sched.encode_context();
  size_t len = 0;
  if (ef != nullptr) {
    GW_ASSIGN_OR_RETURN(len, timed_encode_adding(c, codec, ef->residual(), send, n, ctx, slot(c.rank), cap));
  } else {  // nothing keeps the loss: encode send as it is
    GW_ASSIGN_OR_RETURN(len, timed_encode_input(c, codec, send, n, ctx, slot(c.rank), cap));
  }
  for (uint32_t j = 0; j < pieces; ++j) {
    for (int i = 1; i < p; ++i) {
      const int peer = sched.send_peer(i);
      GW_RETURN_IF_ERROR(
          c.tp.isend(peer, sched.tag(c, j), slot(c.rank) + mp.offset(j), mp.length(len, j), op_of(sends, peer, j)));
    }
  }
  c.tp.progress();
  for (int r = 0; r < p; ++r) {
    size_t bytes = len;
    if (r != c.rank) {
      for (uint32_t j = 0; j < pieces; ++j) GW_RETURN_IF_ERROR(c.wait(op_of(recvs, r, j)));
      GW_ASSIGN_OR_RETURN(bytes, mp.assembled(&op_of(recvs, r, 0), cap, r));
    }
    lengths[r] = bytes;
    if (on_message) GW_RETURN_IF_ERROR(on_message(r));
    c.tp.progress();
  }
  for (int i = 1; i < p; ++i) {
    for (uint32_t j = 0; j < pieces; ++j) GW_RETURN_IF_ERROR(c.wait(op_of(sends, sched.send_peer(i), j)));
  }
  advance_after_call(ef);
  return Status::ok();
}

Status sparse_allgather_allreduce(Context& c, const float* send, float* recv, size_t n, ReduceOp op, Codec& codec,
                                  ErrorFeedback* ef) {
  const int p = c.size;
  const size_t cap = codec.max_encoded_bytes(n, DType::kFloat32);
  uint8_t* msgs = c.scratch.bytes.get<uint8_t>(1, static_cast<size_t>(p) * cap);
  auto* lengths = c.scratch.bytes.get<uint64_t>(5, static_cast<size_t>(p));
  // The sum, in rank order (the same bits on every rank), decoded as messages arrive.
  GW_RETURN_IF_ERROR(sparse_allgather_exchange(c, send, n, codec, ef, msgs, cap, lengths, [&](int r) -> Status {
    if (r == 0 && n > 0) std::memset(recv, 0, n * sizeof(float));  // send is encoded by now
    return timed_decode(c, msgs + static_cast<size_t>(r) * cap, lengths[r], recv, n, DecodeMode::kAccumulate)
        .with_context("message of rank " + std::to_string(r));
  }));
  if (op == ReduceOp::kAvg) {
    for (size_t i = 0; i < n; ++i) recv[i] /= static_cast<float>(p);
  }
  return Status::ok();
}

}  // namespace gw::coll
