// The per-codec device launchers: what each kernels/<codec>_kernels.cu provides. Internal;
// the public entry points are in kernels/device_codec.hpp. Every launcher only enqueues work
// on the job's stream: nothing waits on the host, nothing synchronizes the device.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "compressors/wire_header.hpp"
#include "gradwire/codec.hpp"
#include "gradwire/status.hpp"
#include "kernels/device_scratch.hpp"

namespace gw::kern {

// What one device encode compresses:
//   acc = residual + src  when both are set (error feedback; hd::add(residual[i], src[i]))
//   acc = residual        when src is null (the residual already holds g + r: the
//                         collectives' encode_accumulated)
//   acc = src             when residual is null (no error feedback).
// With a residual, after the stream reaches the end of the encode, residual[i] holds
// acc[i] - decoded[i] (hd::sub), exactly what the host path leaves (encode, then decode in
// kSubtract mode); a sparse codec leaves acc[i] where it sent nothing and acc - acc at
// the indices it sent.
// The message bytes (payload) are exactly the host codec's for the same acc, spec and ctx.
struct EncodeJob {
  const void* src;        // device, n elements of dtype; may be null when residual is set
  float* residual;        // device, n floats, or null
  uint64_t n;             // 0 < n <= wire::kMaxCount (n == 0 never reaches a launcher)
  DType dtype;            // of src; float32 whenever residual is set or the codec is lossy
  const CodecSpec* spec;  // parsed and range-checked
  EncodeContext ctx;
  uint8_t* payload;        // device, right after the 56-byte header; 8-byte aligned; room for
                           // the host codec's max_encoded_bytes(n) - 56
  DeviceScratch* scratch;  // stream-ordered on `stream`
  cudaStream_t stream;
};

// Each sets the header fields the host codec sets (bits, bucket, flags, k, seed, step) and
// returns the payload bytes. dgc's count depends on the data and is known only on the
// device: when *kept comes back set (device memory, valid in stream order until the job's
// scratch is released), header.k and the returned length are the most the message can
// carry, and the header kernel writes the real ones from *kept.
Result<uint64_t> encode_dense(const EncodeJob& job, wire::Header& header);  // none, fp16, bf16
Result<uint64_t> encode_qsgd(const EncodeJob& job, wire::Header& header);
Result<uint64_t> encode_sign(const EncodeJob& job, wire::Header& header);
Result<uint64_t> encode_topk(const EncodeJob& job, wire::Header& header);
Result<uint64_t> encode_dgc(const EncodeJob& job, wire::Header& header, const uint64_t** kept);
Result<uint64_t> encode_randomk(const EncodeJob& job, wire::Header& header);

// Applies a message whose header the host has validated (wire::read_header and the codec's
// validator; for topk and dgc also check_sparse_indices below) to dst: the values the host
// decoder writes, bit for bit, in overwrite, accumulate or subtract mode.
struct DecodeJob {
  const wire::Header* header;
  const uint8_t* payload;  // device
  void* dst;               // device, header->count elements of dtype
  DType dtype;             // float32 for lossy codecs
  DecodeMode mode;
  cudaStream_t stream;
};

Status decode_dense(const DecodeJob& job);
Status decode_qsgd(const DecodeJob& job);
Status decode_sign(const DecodeJob& job);
Status decode_sparse(const DecodeJob& job);  // topk and dgc
Status decode_randomk(const DecodeJob& job);

// The index checks of validate_sparse (compressors/sparse_layout.hpp) for a payload in
// device memory: sets *bad (device) to 1 if an index is >= header.count or not above the one
// before it, leaves it alone otherwise. The caller zeroes *bad first.
Status check_sparse_indices(const wire::Header& header, const uint8_t* payload, uint32_t* bad, cudaStream_t stream);

// An untrusted message in device memory, checked and applied on the device as a topk or dgc
// message of n float32, without the host reading it first: a one-block kernel copies the
// header into verdict->header and checks every field a sparse message must have (the k that
// len implies for n elements, zero quantizer fields, payload = len - 56, ...), the index
// check runs only on a header that passed, and dst is zeroed (overwrite) and scattered into
// only when both passed. Enqueues only; verdict is device memory the caller reads back.
struct SparseVerdict {
  uint8_t header[wire::kHeaderBytes];
  uint32_t header_bad;  // not a sparse message of these dimensions (maybe another codec's)
  uint32_t index_bad;   // an index out of range or not increasing
};
Status decode_sparse_untrusted(const uint8_t* msg, size_t len, float* dst, uint64_t n, DecodeMode mode,
                               SparseVerdict* verdict, cudaStream_t stream);

// The device half of a codec: what device_codec.cpp runs for its id. Each kernel file
// registers its codec's with GW_REGISTER_DEVICE_CODEC; an id with no row has no device
// implementation (encode and decode on device memory answer GW_ERR_UNSUPPORTED).
struct DeviceCodecOps {
  CodecId id;
  // As the encode_* launchers above; kept is set only by codecs whose length only the device
  // knows (dgc).
  Result<uint64_t> (*encode)(const EncodeJob& job, wire::Header& header, const uint64_t** kept);
  Status (*decode)(const DecodeJob& job);
};

// Inline, so the table lives wherever the kernels are linked (the library, or the kernel
// emulator's harnesses, which link a subset of the kernel files).
inline std::vector<DeviceCodecOps>& device_codec_table() {
  static std::vector<DeviceCodecOps> table;
  return table;
}

inline void register_device_codec(const DeviceCodecOps& ops) {
  for (const DeviceCodecOps& o : device_codec_table()) {
    if (o.id == ops.id) {
      std::fprintf(stderr, "gradwire: two device implementations for codec id %d\n", static_cast<int>(ops.id));
      std::abort();
    }
  }
  device_codec_table().push_back(ops);
}

inline const DeviceCodecOps* find_device_codec(CodecId id) {
  for (const DeviceCodecOps& o : device_codec_table()) {
    if (o.id == id) return &o;
  }
  return nullptr;
}

struct DeviceCodecRegistrar {
  DeviceCodecRegistrar(CodecId id, Result<uint64_t> (*encode)(const EncodeJob&, wire::Header&, const uint64_t**),
                       Status (*decode)(const DecodeJob&)) {
    register_device_codec(DeviceCodecOps{id, encode, decode});
  }
};

}  // namespace gw::kern

#define GW_DEVICE_CODEC_CONCAT_INNER(a, b) a##b
#define GW_DEVICE_CODEC_CONCAT(a, b) GW_DEVICE_CODEC_CONCAT_INNER(a, b)
// At namespace scope in the codec's kernel file.
#define GW_REGISTER_DEVICE_CODEC(id, encode, decode)                                                 \
  static const ::gw::kern::DeviceCodecRegistrar GW_DEVICE_CODEC_CONCAT(gw_device_codec_, __LINE__) { \
    id, encode, decode                                                                               \
  }
