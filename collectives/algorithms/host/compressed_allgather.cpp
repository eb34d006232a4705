// All-gather on a compressed wire (ZeRO++'s quantized weight all-gather): every rank encodes
// its block once, chunk by chunk, and the encoded chunks travel the ring, each forwarded as
// soon as it has arrived and been checked (one flow out and one in per rank: on shaped links
// the direct all-to-all's p - 1 flows out lost a third of the rate at 16 MB blocks). Every
// rank decodes every block, its own included, so that all ranks end with the same bits. The
// block may be recv's own slot (in place, as FSDP2 passes it): chunk k is encoded before its
// own slot is overwritten by the decode, and later chunks are still untouched.
#include <string>
#include <vector>

#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/common/message_step.hpp"
#include "collectives/common/reduce.hpp"

namespace gw::coll {

Status compressed_allgather(Context& c, const CompressedAllgatherArgs& a) {
  const int p = c.size;
  const uint64_t n = a.count;
  const size_t es = dtype_size(a.dtype);
  Codec& codec = *a.codec;
  const Chunking chunks = Chunking::for_segment(n, c.chunk_bytes, sizeof(float));
  const uint32_t nk = chunks.count(n);
  if (nk == 0) return Status::ok();
  // Input the codec does not take, and output other than float32, go through float32 scratch.
  const bool widen_input = !codec.accepts(a.dtype);
  const bool narrow_output = a.dtype != DType::kFloat32;
  const DType enc_dtype = widen_input ? DType::kFloat32 : a.dtype;
  const size_t max_msg = codec.max_encoded_bytes(chunks.elems, enc_dtype);
  const size_t slots = static_cast<size_t>(p) * nk;  // (rank, chunk): rank's chunk k
  uint8_t* msgs = c.scratch.bytes.get<uint8_t>(0, slots * max_msg);
  float* wide = widen_input || narrow_output ? c.scratch.bytes.get<float>(1, chunks.elems) : nullptr;
  transport::Op* sends = c.scratch.sends.get(slots);
  transport::Op* recvs = c.scratch.recvs.get(slots);
  auto slot = [&](int r, uint32_t k) { return static_cast<size_t>(r) * nk + k; };
  auto msg_of = [&](int r, uint32_t k) { return msgs + slot(r, k) * max_msg; };
  const uint64_t base_step = c.stream_step(c.seq);
  const CodecId want = codec.spec().id;
  auto* out = static_cast<uint8_t*>(a.recv);
  const auto* in = static_cast<const uint8_t*>(a.send);

  // Step s (0 <= s < p - 1) carries block rank - s to next and brings block rank - s - 1
  // from prev; a block is sent at most once by each rank, so its slot serves both ways.
  auto block_at = [&](int s) { return c.wrap(c.rank - s); };
  for (int s = 0; s < p - 1; ++s) {
    const int b = block_at(s + 1);
    for (uint32_t k = 0; k < nk; ++k) {
      GW_RETURN_IF_ERROR(
          c.tp.irecv(c.prev(), c.tag(static_cast<uint32_t>(s), k), msg_of(b, k), max_msg, recvs[slot(b, k)]));
    }
  }

  // Chunk k of rank r's block = the decode of r's message (this rank's own too).
  auto decode_chunk = [&](int r, uint32_t k, size_t bytes) -> Status {
    const uint64_t len = chunks.length(n, k);
    std::string from = "block from rank " + std::to_string(r);
    if (r != c.rank && r != c.prev()) from += " (forwarded by rank " + std::to_string(c.prev()) + ")";
    Result<MessageInfo> info = inspect(msg_of(r, k), bytes);
    if (!info.is_ok()) return info.status().with_context(from);
    GW_RETURN_IF_ERROR(check_message_codec(info->codec, want, from));
    uint8_t* dst = out + (static_cast<uint64_t>(r) * n + chunks.offset(k)) * es;
    if (!narrow_output)
      return timed_decode(c, msg_of(r, k), bytes, reinterpret_cast<float*>(dst), len, DecodeMode::kOverwrite)
          .with_context(from);
    GW_RETURN_IF_ERROR(timed_decode(c, msg_of(r, k), bytes, wide, len, DecodeMode::kOverwrite).with_context(from));
    narrow_from_float(dst, wide, len, a.dtype);
    return Status::ok();
  };
  // Received chunks, step by step and chunk by chunk: each checked and decoded, then passed
  // on to next unless next is the block's own rank.
  std::vector<uint32_t> next_k(static_cast<size_t>(p - 1), 0);
  uint64_t done = 0;
  const uint64_t foreign = static_cast<uint64_t>(p - 1) * nk;
  auto drain_ready = [&]() -> Result<bool> {
    bool any = false;
    for (int s = 0; s < p - 1; ++s) {
      const int b = block_at(s + 1);
      uint32_t& k = next_k[static_cast<size_t>(s)];
      while (k < nk && recvs[slot(b, k)].finished()) {
        transport::Op& r = recvs[slot(b, k)];
        GW_RETURN_IF_ERROR(c.wait(r));
        GW_RETURN_IF_ERROR(decode_chunk(b, k, r.bytes));
        if (s + 1 < p - 1) {
          GW_RETURN_IF_ERROR(
              c.tp.isend(c.next(), c.tag(static_cast<uint32_t>(s + 1), k), msg_of(b, k), r.bytes, sends[slot(b, k)]));
        }
        ++k;
        ++done;
        any = true;
      }
    }
    return any;
  };

  for (uint32_t k = 0; k < nk; ++k) {
    const uint64_t off = chunks.offset(k);
    const uint64_t len = chunks.length(n, k);
    const void* src = in + off * es;
    if (widen_input) {
      widen_to_float(wide, src, len, a.dtype, false);
      src = wide;
    }
    const EncodeContext ctx{message_step(base_step, 0, k), static_cast<uint32_t>(c.rank)};
    size_t bytes = 0;
    {
      ScopedSeconds t(c.stats != nullptr ? &c.stats->encode_s : nullptr, "encode", hidden_counter(c), &c.tp);
      GW_ASSIGN_OR_RETURN(bytes, codec.encode(src, len, enc_dtype, ctx, msg_of(c.rank, k), max_msg));
    }
    if (p > 1) GW_RETURN_IF_ERROR(c.tp.isend(c.next(), c.tag(0, k), msg_of(c.rank, k), bytes, sends[slot(c.rank, k)]));
    c.tp.progress();
    // The send is queued from msg_of(rank, k), which the decode only reads.
    GW_RETURN_IF_ERROR(decode_chunk(c.rank, k, bytes));
    GW_RETURN_IF_ERROR(drain_ready().status());
  }
  while (done < foreign) {
    GW_ASSIGN_OR_RETURN(const bool any, drain_ready());
    if (any || c.tp.progress()) continue;
    GW_RETURN_IF_ERROR(c.idle("blocks from the other ranks", c.deadline));
  }
  // Sent: this rank's own block and every block it forwarded (all but next's own).
  for (int s = 0; s < p - 1; ++s) GW_RETURN_IF_ERROR(c.wait_all(sends + slot(block_at(s), 0), nk));
  return Status::ok();
}

}  // namespace gw::coll
