// Compressed scatter-reduce on device buffers: scatter_reduce_allreduce.cpp's algorithm, with
// the encodes, sums and decodes on the device and the messages staged through pinned host
// memory. Every encode and its copy down are enqueued at once, so the device runs ahead and a
// chunk is sent as soon as its copy lands, while later chunks are still being encoded.
#include <string>
#include <vector>

#include "collectives/algorithms/device/device_algorithms.hpp"
#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/algorithms/schedules/scatter_reduce_schedule.hpp"

namespace gw::coll {

Status device_scatter_reduce_allreduce(Context& c, DeviceBackend& dev, const float* send, float* recv, size_t n,
                                       ReduceOp op, const Codec& codec, DeviceEfState* ef) {
  using S = ScatterReduceSchedule;
  const int p = c.size;
  const S sched = S::make(c, n, ef);  // the host algorithm's: keyed by piece, too
  const uint64_t own_start = sched.own_start();
  const uint64_t own_len = sched.own_len();
  const Chunking& chunks = sched.chunks;
  const uint32_t max_chunks = sched.max_chunks;
  const size_t max_msg = slot_bytes(codec.max_encoded_bytes(chunks.elems, DType::kFloat32));
  const size_t per_phase = sched.per_phase();
  auto slot = [&](int peer, uint32_t k) { return sched.slot(peer, k); };
  auto seg_chunks = [&](int seg) { return sched.seg_chunks(seg); };
  auto seg_chunk_len = [&](int seg, uint32_t k) { return sched.chunk_len(seg, k); };
  auto seg_off = [&](int seg, uint32_t k) { return sched.chunk_start(seg, k); };

  float* acc = nullptr;
  if (ef != nullptr) {
    acc = ef->residual();
    ScopedSeconds t(c.stats != nullptr ? &c.stats->encode_s : nullptr, "encode");
    GW_RETURN_IF_ERROR(dev.add(acc, send, n));
  } else {  // only my segment receives contributions; the others are encoded from send
    GW_ASSIGN_OR_RETURN(void* a, dev.device_scratch(0, n * sizeof(float)));
    acc = static_cast<float*>(a);
    GW_RETURN_IF_ERROR(dev.copy(acc + own_start, send + own_start, own_len * sizeof(float)));
  }
  float* owner_res = nullptr;
  if (ef != nullptr) {
    GW_ASSIGN_OR_RETURN(owner_res, ef->owner_residual(own_len));
  } else {
    GW_ASSIGN_OR_RETURN(void* o, dev.device_scratch(4, own_len * sizeof(float)));
    owner_res = static_cast<float*>(o);
    GW_RETURN_IF_ERROR(dev.zero(owner_res, own_len * sizeof(float)));
  }
  // Message slots: to owners, my own results, and received (both phases); device and host.
  GW_ASSIGN_OR_RETURN(void* out_d, dev.device_scratch(1, per_phase * max_msg));
  GW_ASSIGN_OR_RETURN(void* own_d, dev.device_scratch(2, max_chunks * max_msg));
  GW_ASSIGN_OR_RETURN(void* in_d, dev.device_scratch(3, 2 * per_phase * max_msg));
  GW_ASSIGN_OR_RETURN(uint8_t * out_h, dev.host_staging(0, per_phase * max_msg));
  GW_ASSIGN_OR_RETURN(uint8_t * own_h, dev.host_staging(1, max_chunks * max_msg));
  GW_ASSIGN_OR_RETURN(uint8_t * in_h, dev.host_staging(2, 2 * per_phase * max_msg));
  auto* out_dev = static_cast<uint8_t*>(out_d);
  auto* own_dev = static_cast<uint8_t*>(own_d);
  auto* in_dev = static_cast<uint8_t*>(in_d);
  auto in_at = [&](int phase, int peer, uint32_t k) {
    return (static_cast<size_t>(phase) * per_phase + slot(peer, k)) * max_msg;
  };
  transport::Op* sends = c.scratch.sends.get(2 * per_phase);
  transport::Op* recvs = c.scratch.recvs.get(2 * per_phase);

  for (int peer = 0; peer < p; ++peer) {
    if (peer == c.rank) continue;
    for (uint32_t k = 0; k < seg_chunks(c.rank); ++k) {
      GW_RETURN_IF_ERROR(c.tp.irecv(peer, sched.tag(c, S::kContribute, k), in_h + in_at(S::kContribute, peer, k),
                                    max_msg, recvs[slot(peer, k)]));
    }
    for (uint32_t k = 0; k < seg_chunks(peer); ++k) {
      GW_RETURN_IF_ERROR(c.tp.irecv(peer, sched.tag(c, S::kResult, k), in_h + in_at(S::kResult, peer, k), max_msg,
                                    recvs[per_phase + slot(peer, k)]));
    }
  }

  FenceQueue fenced;
  // Phase 0: every foreign chunk encoded (with EF in place), copied down, sent when it lands.
  for (uint32_t k = 0; k < max_chunks; ++k) {
    for (int i = 1; i < p; ++i) {
      const int owner = sched.send_peer(i);
      if (k >= seg_chunks(owner)) continue;
      const size_t at = slot(owner, k) * max_msg;
      const EncodeContext ctx = sched.encode_context(S::kContribute, k);
      const uint64_t off = seg_off(owner, k);
      size_t len = 0;
      {
        ScopedSeconds t(c.stats != nullptr ? &c.stats->encode_s : nullptr, "encode");
        GW_ASSIGN_OR_RETURN(
            len, ef != nullptr
                     ? dev.encode_accumulated(codec, acc + off, seg_chunk_len(owner, k), ctx, out_dev + at, max_msg)
                     : dev.encode_input(codec, send + off, seg_chunk_len(owner, k), ctx, out_dev + at, max_msg));
      }
      GW_RETURN_IF_ERROR(dev.copy(out_h + at, out_dev + at, len));
      GW_ASSIGN_OR_RETURN(DeviceBackend::Fence f, dev.fence());
      transport::Op* sent = &sends[slot(owner, k)];
      const uint64_t tag = sched.tag(c, S::kContribute, k);
      fenced.push(f, [&c, owner, tag, buf = out_h + at, len, sent]() -> Status {
        GW_ASSIGN_OR_RETURN(const size_t exact, wire::encoded_length(buf, len));
        return c.tp.isend(owner, tag, buf, exact, *sent);
      });
    }
  }

  // My segment, chunk by chunk: contributions applied in rank order (the same sum on every
  // run), then the owner's encode, whose message goes to every rank and into my result.
  const uint32_t own_chunks = seg_chunks(c.rank);
  uint32_t own_k = 0;
  int own_peer = 0;  // the next contribution to apply to chunk own_k
  auto finish_own = [&](uint32_t k) -> Status {
    const uint64_t len = seg_chunk_len(c.rank, k);
    float* sum = acc + own_start + chunks.offset(k);
    GW_RETURN_IF_ERROR(dev.fold_owner(owner_res + chunks.offset(k), sum, len, op == ReduceOp::kAvg ? p : 1));
    const size_t at = static_cast<size_t>(k) * max_msg;
    const EncodeContext ctx = sched.encode_context(S::kResult, k);
    size_t mlen = 0;
    {
      ScopedSeconds t(c.stats != nullptr ? &c.stats->encode_s : nullptr, "encode");
      GW_ASSIGN_OR_RETURN(mlen,
                          dev.encode_accumulated(codec, owner_res + chunks.offset(k), len, ctx, own_dev + at, max_msg));
    }
    GW_RETURN_IF_ERROR(dev.copy(own_h + at, own_dev + at, mlen));
    GW_ASSIGN_OR_RETURN(DeviceBackend::Fence f, dev.fence());
    fenced.push(f, [&, k, at, copied = mlen]() -> Status {
      GW_ASSIGN_OR_RETURN(const size_t exact, wire::encoded_length(own_h + at, copied));
      GW_ASSIGN_OR_RETURN(wire::Header h, wire::read_header(own_h + at, exact));
      GW_RETURN_IF_ERROR(
          dev.apply(h, own_dev + at, exact, recv + own_start + chunks.offset(k), DecodeMode::kOverwrite));
      for (int i = 1; i < p; ++i) {
        const int peer = sched.send_peer(i);
        GW_RETURN_IF_ERROR(
            c.tp.isend(peer, sched.tag(c, S::kResult, k), own_h + at, exact, sends[per_phase + slot(peer, k)]));
      }
      return Status::ok();
    });
    return Status::ok();
  };
  // Copies a received message up (after checking it in host memory) and applies it.
  auto apply_received = [&](size_t at, size_t bytes, float* dst, uint64_t len, DecodeMode mode,
                            const std::string& what) -> Status {
    ScopedSeconds t(c.stats != nullptr ? &c.stats->decode_s : nullptr, "decode");
    auto h = validate_staged(in_h + at, bytes, len);
    if (!h.is_ok()) return h.status().with_context(what);
    GW_RETURN_IF_ERROR(dev.copy(in_dev + at, in_h + at, bytes));
    return dev.apply(h.value(), in_dev + at, bytes, dst, mode);
  };

  size_t results_left = 0;
  for (int peer = 0; peer < p; ++peer) results_left += peer == c.rank ? 0 : seg_chunks(peer);
  std::vector<uint8_t> applied(per_phase, 0);
  while (own_k < own_chunks || results_left > 0 || !fenced.empty()) {
    bool any = false;
    GW_RETURN_IF_ERROR(fenced.run_ready(dev, &any));
    while (own_k < own_chunks) {
      if (own_peer == c.rank) ++own_peer;
      if (own_peer >= p) {
        GW_RETURN_IF_ERROR(finish_own(own_k++));
        own_peer = 0;
        any = true;
        continue;
      }
      transport::Op& r = recvs[slot(own_peer, own_k)];
      GW_ASSIGN_OR_RETURN(const bool got, c.ready(r));
      if (!got) break;
      GW_RETURN_IF_ERROR(apply_received(in_at(S::kContribute, own_peer, own_k), r.bytes,
                                        acc + own_start + chunks.offset(own_k), seg_chunk_len(c.rank, own_k),
                                        DecodeMode::kAccumulate, "contribution from rank " + std::to_string(own_peer)));
      ++own_peer;
      any = true;
    }
    for (int peer = 0; peer < p && results_left > 0; ++peer) {
      if (peer == c.rank) continue;
      for (uint32_t k = 0; k < seg_chunks(peer); ++k) {
        transport::Op& r = recvs[per_phase + slot(peer, k)];
        if (applied[slot(peer, k)] != 0) continue;
        GW_ASSIGN_OR_RETURN(const bool got, c.ready(r));
        if (!got) continue;
        GW_RETURN_IF_ERROR(apply_received(in_at(S::kResult, peer, k), r.bytes, recv + seg_off(peer, k),
                                          seg_chunk_len(peer, k), DecodeMode::kOverwrite,
                                          "result from rank " + std::to_string(peer)));
        applied[slot(peer, k)] = 1;
        --results_left;
        any = true;
      }
    }
    if (any || c.tp.progress()) continue;
    GW_RETURN_IF_ERROR(idle(c, !fenced.empty(), "the reduced segments"));
  }
  GW_RETURN_IF_ERROR(c.wait_all(sends, 2 * per_phase));
  GW_RETURN_IF_ERROR(drain(c, dev));
  advance_after_call(ef);
  return Status::ok();
}

}  // namespace gw::coll
