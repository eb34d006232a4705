// The compressed all-gather on device buffers (float32): compressed_allgather.cpp's messages,
// so the host algorithm's bits, with the encodes and decodes on the device and the messages
// staged through pinned host memory, each sent straight to every other rank (the host call
// forwards them along the ring). Every encode and its copy down are enqueued at once; a chunk
// is sent, and its own decode enqueued, as soon as its copy lands. In place is safe: the
// decodes of this rank's block are enqueued after every encode.
#include <string>

#include "collectives/algorithms/device/device_algorithms.hpp"
#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/common/message_step.hpp"

namespace gw::coll {

Status device_allgather_compressed(Context& c, DeviceBackend& dev, const DeviceAllgatherCompressed& a) {
  const int p = c.size;
  const uint64_t n = a.count;
  const Codec& codec = *a.codec;
  const Chunking chunks = Chunking::for_segment(n, c.chunk_bytes, sizeof(float));
  const uint32_t nk = chunks.count(n);
  if (nk == 0) return Status::ok();
  const size_t max_msg = slot_bytes(codec.max_encoded_bytes(chunks.elems, DType::kFloat32));
  const size_t slots = static_cast<size_t>(p) * nk;  // (rank, chunk)
  auto slot = [&](int r, uint32_t k) { return static_cast<size_t>(r) * nk + k; };
  GW_ASSIGN_OR_RETURN(void* msgs_d, dev.device_scratch(0, slots * max_msg));
  GW_ASSIGN_OR_RETURN(uint8_t * msgs_h, dev.host_staging(0, slots * max_msg));
  auto* msgs_dev = static_cast<uint8_t*>(msgs_d);
  transport::Op* sends = c.scratch.sends.get(slots);
  transport::Op* recvs = c.scratch.recvs.get(slots);
  const uint64_t base_step = c.stream_step(c.seq);
  const CodecId want = codec.spec().id;

  for (int i = 1; i < p; ++i) {
    const int peer = (c.rank + p - i) % p;
    for (uint32_t k = 0; k < nk; ++k) {
      const size_t at = slot(peer, k) * max_msg;
      GW_RETURN_IF_ERROR(c.tp.irecv(peer, c.tag(0, k), msgs_h + at, max_msg, recvs[slot(peer, k)]));
    }
  }

  // Chunk k of rank r's block = the decode of r's staged message (len bytes at its slot).
  auto decode_chunk = [&](int r, uint32_t k, size_t len) -> Status {
    const std::string from = "block from rank " + std::to_string(r);
    const size_t at = slot(r, k) * max_msg;
    auto h = validate_staged(msgs_h + at, len, chunks.length(n, k));
    if (!h.is_ok()) return h.status().with_context(from);
    GW_RETURN_IF_ERROR(check_message_codec(h->codec, want, from));
    ScopedSeconds t(c.stats != nullptr ? &c.stats->decode_s : nullptr, "decode");
    if (r != c.rank) GW_RETURN_IF_ERROR(dev.copy(msgs_dev + at, msgs_h + at, len));
    return dev.apply(h.value(), msgs_dev + at, len, a.recv + static_cast<uint64_t>(r) * n + chunks.offset(k),
                     DecodeMode::kOverwrite);
  };

  FenceQueue fenced;
  for (uint32_t k = 0; k < nk; ++k) {
    const size_t at = slot(c.rank, k) * max_msg;
    const EncodeContext ctx{message_step(base_step, 0, k), static_cast<uint32_t>(c.rank)};
    size_t bytes = 0;
    {
      ScopedSeconds t(c.stats != nullptr ? &c.stats->encode_s : nullptr, "encode");
      GW_ASSIGN_OR_RETURN(
          bytes, dev.encode_input(codec, a.send + chunks.offset(k), chunks.length(n, k), ctx, msgs_dev + at, max_msg));
    }
    GW_RETURN_IF_ERROR(dev.copy(msgs_h + at, msgs_dev + at, bytes));
    GW_ASSIGN_OR_RETURN(DeviceBackend::Fence f, dev.fence());
    fenced.push(f, [&, k, at, bytes]() -> Status {
      GW_ASSIGN_OR_RETURN(const size_t exact, wire::encoded_length(msgs_h + at, bytes));
      for (int i = 1; i < p; ++i) {
        const int peer = (c.rank + i) % p;
        GW_RETURN_IF_ERROR(c.tp.isend(peer, c.tag(0, k), msgs_h + at, exact, sends[slot(peer, k)]));
      }
      return decode_chunk(c.rank, k, exact);
    });
  }

  // Foreign chunks in the order they are sent: chunk by chunk, from rank - 1 backwards.
  const uint64_t foreign = static_cast<uint64_t>(p - 1) * nk;
  uint64_t done = 0;
  while (done < foreign || !fenced.empty()) {
    bool any = false;
    GW_RETURN_IF_ERROR(fenced.run_ready(dev, &any));
    while (done < foreign) {
      const auto k = static_cast<uint32_t>(done / static_cast<uint64_t>(p - 1));
      const int peer = (c.rank + p - 1 - static_cast<int>(done % static_cast<uint64_t>(p - 1))) % p;
      transport::Op& r = recvs[slot(peer, k)];
      GW_ASSIGN_OR_RETURN(const bool got, c.ready(r));
      if (!got) break;
      GW_RETURN_IF_ERROR(decode_chunk(peer, k, r.bytes));
      ++done;
      any = true;
    }
    if (any || c.tp.progress()) continue;
    GW_RETURN_IF_ERROR(idle(c, !fenced.empty(), "blocks from the other ranks"));
  }
  for (int i = 1; i < p; ++i) GW_RETURN_IF_ERROR(c.wait_all(sends + slot((c.rank + i) % p, 0), nk));
  return drain(c, dev);
}

}  // namespace gw::coll
