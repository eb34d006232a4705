// Reduce-scatter with blocks of any sizes, compressed or raw. Every rank sends its
// contribution to each other block straight to the block's owner (an all-to-all, chunk by
// chunk, staggered so that owners are not all hit at once); the owner adds the contributions
// in rank order, starting from its own, and writes the block out. With a codec each
// contribution is encoded once and summed in float32 whatever the input type (float16 and
// bfloat16 inputs are never summed in half precision), with error feedback kept by the
// sender for every element it sends; without one the bytes travel as they are and the owner
// reduces them in the input type with any op (NCCL's semantics, uneven blocks).
#include <cstring>
#include <string>

#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/algorithms/schedules/reduce_scatter_schedule.hpp"
#include "collectives/common/reduce.hpp"
#include "compressors/element_io.hpp"

namespace gw::coll {
namespace {

using Sched = ReduceScatterSchedule;

Status wrong_length(int peer, uint32_t k, size_t got, uint64_t want) {
  return Status(Code::kRemote, "rank " + std::to_string(peer) + " sent " + std::to_string(got) + " bytes for chunk " +
                                   std::to_string(k) + " of this rank's block, expected " + std::to_string(want));
}

}  // namespace

Status compressed_reduce_scatter(Context& c, const ReduceScatterArgs& a) {
  const int p = c.size;
  const Sched sched = Sched::make(c, a.counts, a.ef);
  const uint64_t n = sched.total();
  const uint64_t own_start = sched.own_start();
  const uint64_t own_len = sched.own_len();
  const size_t es = dtype_size(a.dtype);
  const auto* in = static_cast<const uint8_t*>(a.send);
  Codec* codec = a.codec;
  ErrorFeedback* ef = a.ef;
  const int divisor = a.op == ReduceOp::kAvg ? p : 1;

  // What foreign blocks are encoded from: the residual (which then keeps the loss), the
  // input itself, or the input widened to float32 for a codec that takes only float32.
  const void* src = a.send;
  DType src_dtype = a.dtype;
  float* acc = nullptr;            // with ef: the residual, encoded in place
  const float* add_f32 = nullptr;  // float32 input with ef: added to acc chunk by chunk
  // The sum of my block: float32 with a codec, the input type without.
  void* sum = nullptr;
  // dst (n floats) = (add: +=) the input widened, outside my block.
  auto widen_others = [&](float* dst, bool add) {
    widen_to_float(dst, in, own_start, a.dtype, add);
    widen_to_float(dst + own_start + own_len, in + (own_start + own_len) * es, n - own_start - own_len, a.dtype, add);
  };
  {
    ScopedSeconds t(c.stats != nullptr ? &c.stats->encode_s : nullptr, "encode");
    if (codec == nullptr) {
      sum = c.scratch.bytes.get<uint8_t>(0, own_len * es);
      if (own_len > 0) std::memcpy(sum, in + own_start * es, own_len * es);
    } else {
      float* s = c.scratch.bytes.get<float>(0, own_len);
      widen_to_float(s, in + own_start * es, own_len, a.dtype, false);
      if (ef != nullptr) {
        // My own block is never compressed: what the residual held for it joins the sum now.
        float* res = ef->residual();
        detail::add_into(s, res + own_start, own_len);
        if (own_len > 0) std::memset(res + own_start, 0, own_len * sizeof(float));
        if (a.dtype == DType::kFloat32) {
          add_f32 = static_cast<const float*>(a.send);  // each encode adds its chunk as it goes
        } else {
          widen_others(res, true);
        }
        acc = res;
        src = res;
        src_dtype = DType::kFloat32;
      } else if (!codec->accepts(a.dtype)) {
        float* wide = c.scratch.bytes.get<float>(1, n);
        widen_others(wide, false);
        src = wide;
        src_dtype = DType::kFloat32;
      }
      sum = s;
    }
  }

  const Chunking& chunks = sched.chunks;
  const size_t max_msg = codec != nullptr ? codec->max_encoded_bytes(chunks.elems, src_dtype) : chunks.elems * es;
  const size_t slots = sched.slots();
  uint8_t* out_msgs = codec != nullptr ? c.scratch.bytes.get<uint8_t>(2, slots * max_msg) : nullptr;
  uint8_t* in_msgs = c.scratch.bytes.get<uint8_t>(3, slots * max_msg);
  transport::Op* sends = c.scratch.sends.get(slots);
  transport::Op* recvs = c.scratch.recvs.get(slots);
  auto in_msg = [&](int peer, uint32_t k) { return in_msgs + sched.slot(peer, k) * max_msg; };

  const uint32_t own_chunks = sched.block_chunks(c.rank);
  for (int peer = 0; peer < p; ++peer) {
    if (peer == c.rank) continue;
    for (uint32_t k = 0; k < own_chunks; ++k) {
      GW_RETURN_IF_ERROR(c.tp.irecv(peer, sched.tag(c, k), in_msg(peer, k), max_msg, recvs[sched.slot(peer, k)]));
    }
  }

  // Chunk k of my block, once every contribution is here: added in rank order (the same sum
  // on every run), then written out.
  auto finish_chunk = [&](uint32_t k) -> Status {
    const uint64_t len = sched.chunk_len(c.rank, k);
    const uint64_t off = chunks.offset(k);
    for (int peer = 0; peer < p; ++peer) {
      if (peer == c.rank) continue;
      transport::Op& r = recvs[sched.slot(peer, k)];
      GW_RETURN_IF_ERROR(c.wait(r));
      if (codec == nullptr) {
        if (r.bytes != len * es) return wrong_length(peer, k, r.bytes, len * es);
        reduce_into(static_cast<uint8_t*>(sum) + off * es, in_msg(peer, k), len, a.dtype, a.op);
      } else {
        GW_RETURN_IF_ERROR(
            timed_decode(c, in_msg(peer, k), r.bytes, static_cast<float*>(sum) + off, len, DecodeMode::kAccumulate)
                .with_context("contribution from rank " + std::to_string(peer)));
      }
    }
    auto* out = static_cast<uint8_t*>(a.recv) + off * es;
    if (codec == nullptr) {
      if (len > 0) std::memcpy(out, static_cast<uint8_t*>(sum) + off * es, len * es);
      if (a.op == ReduceOp::kAvg) divide(out, len, a.dtype, p);
    } else {
      narrow_from_float(out, static_cast<float*>(sum) + off, len, a.dtype, divisor);
    }
    return Status::ok();
  };
  uint32_t next_own = 0;
  auto contributions_arrived = [&](uint32_t k) {
    for (int peer = 0; peer < p; ++peer) {
      if (peer != c.rank && !recvs[sched.slot(peer, k)].finished()) return false;
    }
    return true;
  };
  auto drain_ready = [&]() -> Result<bool> {
    bool any = false;
    while (next_own < own_chunks && contributions_arrived(next_own)) {
      GW_RETURN_IF_ERROR(finish_chunk(next_own++));
      any = true;
    }
    return any;
  };

  // Every foreign block, chunk by chunk across the owners, so that every owner soon holds a
  // complete first chunk; between chunks, my own chunks whose contributions are all here.
  for (uint32_t k = 0; k < sched.max_chunks; ++k) {
    for (int i = 1; i < p; ++i) {
      const int owner = sched.send_peer(i);
      if (k >= sched.block_chunks(owner)) continue;
      const uint64_t off = sched.chunk_start(owner, k);
      const uint64_t len = sched.chunk_len(owner, k);
      const uint8_t* msg = in + off * es;
      size_t bytes = len * es;
      if (codec != nullptr) {
        uint8_t* out = out_msgs + sched.slot(owner, k) * max_msg;
        const EncodeContext ctx = sched.encode_context(k);
        if (add_f32 != nullptr) {
          GW_ASSIGN_OR_RETURN(bytes, timed_encode_adding(c, *codec, acc + off, add_f32 + off, len, ctx, out, max_msg));
        } else if (acc != nullptr) {
          GW_ASSIGN_OR_RETURN(bytes, timed_encode(c, *codec, acc + off, len, ctx, out, max_msg));
        } else {
          ScopedSeconds t(c.stats != nullptr ? &c.stats->encode_s : nullptr, "encode", hidden_counter(c), &c.tp);
          GW_ASSIGN_OR_RETURN(bytes, codec->encode(static_cast<const uint8_t*>(src) + off * dtype_size(src_dtype), len,
                                                   src_dtype, ctx, out, max_msg));
        }
        msg = out;
      }
      GW_RETURN_IF_ERROR(c.tp.isend(owner, sched.tag(c, k), msg, bytes, sends[sched.slot(owner, k)]));
      c.tp.progress();  // let the transport move what is posted while the next chunk encodes
    }
    GW_RETURN_IF_ERROR(drain_ready().status());
  }
  while (next_own < own_chunks) {
    GW_ASSIGN_OR_RETURN(const bool any, drain_ready());
    if (any || c.tp.progress()) continue;
    GW_RETURN_IF_ERROR(c.idle("contributions to this rank's block", c.deadline));
  }
  GW_RETURN_IF_ERROR(c.wait_all(sends, slots));
  advance_after_call(ef);
  return Status::ok();
}

}  // namespace gw::coll
