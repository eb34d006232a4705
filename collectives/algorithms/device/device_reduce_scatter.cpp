// Compressed reduce-scatter on device buffers: compressed_reduce_scatter.cpp's algorithm
// (float32, with a codec), with the encodes, sums and decodes on the device and the messages
// staged through pinned host memory. Every encode and its copy down are enqueued at once, so
// the device runs ahead and a chunk is sent as soon as its copy lands.
#include <string>

#include "collectives/algorithms/device/device_algorithms.hpp"
#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/algorithms/schedules/reduce_scatter_schedule.hpp"

namespace gw::coll {

Status device_reduce_scatter(Context& c, DeviceBackend& dev, const DeviceReduceScatter& a) {
  using Sched = ReduceScatterSchedule;
  const int p = c.size;
  const Sched sched = Sched::make(c, a.counts, a.ef);  // the host algorithm's
  const uint64_t n = sched.total();
  const uint64_t own_start = sched.own_start();
  const uint64_t own_len = sched.own_len();
  const uint64_t own_end = own_start + own_len;
  const Codec& codec = *a.codec;
  DeviceEfState* ef = a.ef;

  // The sum of my block starts as my own contribution (with what the residual held for it:
  // my block is never compressed); with EF the residual takes the rest of the input.
  GW_ASSIGN_OR_RETURN(void* sum_d, dev.device_scratch(0, own_len * sizeof(float)));
  auto* sum = static_cast<float*>(sum_d);
  float* acc = nullptr;
  {
    ScopedSeconds t(c.stats != nullptr ? &c.stats->encode_s : nullptr, "encode");
    GW_RETURN_IF_ERROR(dev.copy(sum, a.send + own_start, own_len * sizeof(float)));
    if (ef != nullptr) {
      acc = ef->residual();
      GW_RETURN_IF_ERROR(dev.add(sum, acc + own_start, own_len));
      GW_RETURN_IF_ERROR(dev.zero(acc + own_start, own_len * sizeof(float)));
      GW_RETURN_IF_ERROR(dev.add(acc, a.send, own_start));
      GW_RETURN_IF_ERROR(dev.add(acc + own_end, a.send + own_end, n - own_end));
    }
  }
  const Chunking& chunks = sched.chunks;
  const size_t max_msg = slot_bytes(codec.max_encoded_bytes(chunks.elems, DType::kFloat32));
  const size_t slots = sched.slots();
  GW_ASSIGN_OR_RETURN(void* out_d, dev.device_scratch(1, slots * max_msg));
  GW_ASSIGN_OR_RETURN(void* in_d, dev.device_scratch(3, slots * max_msg));
  GW_ASSIGN_OR_RETURN(uint8_t * out_h, dev.host_staging(0, slots * max_msg));
  GW_ASSIGN_OR_RETURN(uint8_t * in_h, dev.host_staging(2, slots * max_msg));
  auto* out_dev = static_cast<uint8_t*>(out_d);
  auto* in_dev = static_cast<uint8_t*>(in_d);
  transport::Op* sends = c.scratch.sends.get(slots);
  transport::Op* recvs = c.scratch.recvs.get(slots);

  const uint32_t own_chunks = sched.block_chunks(c.rank);
  for (int peer = 0; peer < p; ++peer) {
    if (peer == c.rank) continue;
    for (uint32_t k = 0; k < own_chunks; ++k) {
      GW_RETURN_IF_ERROR(
          c.tp.irecv(peer, sched.tag(c, k), in_h + sched.slot(peer, k) * max_msg, max_msg, recvs[sched.slot(peer, k)]));
    }
  }

  FenceQueue fenced;
  for (uint32_t k = 0; k < sched.max_chunks; ++k) {
    for (int i = 1; i < p; ++i) {
      const int owner = sched.send_peer(i);
      if (k >= sched.block_chunks(owner)) continue;
      const size_t at = sched.slot(owner, k) * max_msg;
      const EncodeContext ctx = sched.encode_context(k);
      const uint64_t off = sched.chunk_start(owner, k);
      const uint64_t len = sched.chunk_len(owner, k);
      size_t bytes = 0;
      {
        ScopedSeconds t(c.stats != nullptr ? &c.stats->encode_s : nullptr, "encode");
        GW_ASSIGN_OR_RETURN(bytes, acc != nullptr
                                       ? dev.encode_accumulated(codec, acc + off, len, ctx, out_dev + at, max_msg)
                                       : dev.encode_input(codec, a.send + off, len, ctx, out_dev + at, max_msg));
      }
      GW_RETURN_IF_ERROR(dev.copy(out_h + at, out_dev + at, bytes));
      GW_ASSIGN_OR_RETURN(DeviceBackend::Fence f, dev.fence());
      transport::Op* sent = &sends[sched.slot(owner, k)];
      const uint64_t tag = sched.tag(c, k);
      fenced.push(f, [&c, owner, tag, buf = out_h + at, bytes, sent]() -> Status {
        GW_ASSIGN_OR_RETURN(const size_t exact, wire::encoded_length(buf, bytes));
        return c.tp.isend(owner, tag, buf, exact, *sent);
      });
    }
  }

  // My block, chunk by chunk: contributions applied in rank order (the same sum on every
  // run), then written out.
  uint32_t own_k = 0;
  int own_peer = 0;  // the next contribution to apply to chunk own_k
  while (own_k < own_chunks || !fenced.empty()) {
    bool any = false;
    GW_RETURN_IF_ERROR(fenced.run_ready(dev, &any));
    while (own_k < own_chunks) {
      if (own_peer == c.rank) ++own_peer;
      const uint64_t off = chunks.offset(own_k);
      const uint64_t len = sched.chunk_len(c.rank, own_k);
      if (own_peer >= p) {
        GW_RETURN_IF_ERROR(dev.copy(a.recv + off, sum + off, len * sizeof(float)));
        if (a.op == ReduceOp::kAvg) GW_RETURN_IF_ERROR(dev.divide(a.recv + off, len, p));
        ++own_k;
        own_peer = 0;
        any = true;
        continue;
      }
      transport::Op& r = recvs[sched.slot(own_peer, own_k)];
      GW_ASSIGN_OR_RETURN(const bool got, c.ready(r));
      if (!got) break;
      {
        ScopedSeconds t(c.stats != nullptr ? &c.stats->decode_s : nullptr, "decode");
        const size_t at = sched.slot(own_peer, own_k) * max_msg;
        auto h = validate_staged(in_h + at, r.bytes, len);
        if (!h.is_ok()) return h.status().with_context("contribution from rank " + std::to_string(own_peer));
        GW_RETURN_IF_ERROR(dev.copy(in_dev + at, in_h + at, r.bytes));
        GW_RETURN_IF_ERROR(dev.apply(h.value(), in_dev + at, r.bytes, sum + off, DecodeMode::kAccumulate));
      }
      ++own_peer;
      any = true;
    }
    if (any || c.tp.progress()) continue;
    GW_RETURN_IF_ERROR(idle(c, !fenced.empty(), "contributions to this rank's block"));
  }
  GW_RETURN_IF_ERROR(c.wait_all(sends, slots));
  GW_RETURN_IF_ERROR(drain(c, dev));
  advance_after_call(ef);
  return Status::ok();
}

}  // namespace gw::coll
