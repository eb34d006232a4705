#include "compressors/wire_header.hpp"

#include <string>

#include "compressors/codec_registry.hpp"

namespace gw::wire {

void write_header(const Header& h, uint8_t* out) {
  for (int i = 0; i < 4; ++i) out[i] = kMagic[i];
  out[4] = kVersion;
  out[5] = static_cast<uint8_t>(h.codec);
  out[6] = static_cast<uint8_t>(h.dtype);
  out[7] = h.flags;
  store_u64(out + 8, h.count);
  store_u32(out + 16, h.bits);
  store_u32(out + 20, h.bucket);
  store_u64(out + kKAt, h.k);
  store_u64(out + 32, h.seed);
  store_u64(out + 40, h.step);
  store_u64(out + kPayloadBytesAt, h.payload_bytes);
}

namespace {

// read_header's and stated_length's first checks: the size, the magic and the version.
Status check_preamble(const uint8_t* msg, size_t len) {
  if (msg == nullptr) return invalid_argument("message pointer is null");
  if (len < kHeaderBytes) {
    return invalid_message("message is " + std::to_string(len) + " bytes, shorter than the " +
                           std::to_string(kHeaderBytes) + "-byte header");
  }
  for (int i = 0; i < 4; ++i) {
    if (msg[i] != kMagic[i]) return invalid_message("bad magic: not a gradwire message");
  }
  if (msg[4] != kVersion) {
    return invalid_message("wire format version " + std::to_string(msg[4]) +
                           " is not supported (this library reads version " + std::to_string(kVersion) + ")");
  }
  return Status::ok();
}

}  // namespace

Result<uint64_t> stated_length(const uint8_t* msg, size_t len) {
  GW_RETURN_IF_ERROR(check_preamble(msg, len));
  const uint64_t payload = load_u64(msg + kPayloadBytesAt);
  if (payload > UINT64_MAX - kHeaderBytes) {
    return invalid_message("header claims " + std::to_string(payload) + " payload bytes");
  }
  return kHeaderBytes + payload;
}

Result<size_t> encoded_length(const uint8_t* head, size_t copied) {
  if (copied < kHeaderBytes) return internal_error("a staged message is shorter than its header");
  const uint64_t payload = load_u64(head + kPayloadBytesAt);
  if (payload > copied - kHeaderBytes) {
    return internal_error("a staged message's header claims " + std::to_string(payload) +
                          " payload bytes, more than its encode could write (" + std::to_string(copied) + ")");
  }
  return kHeaderBytes + static_cast<size_t>(payload);
}

Result<Header> read_header(const uint8_t* msg, size_t len) {
  GW_RETURN_IF_ERROR(check_preamble(msg, len));
  Header h;
  if (detail::find_codec(static_cast<CodecId>(msg[5])) == nullptr) {
    return invalid_message("unknown codec id " + std::to_string(msg[5]));
  }
  h.codec = static_cast<CodecId>(msg[5]);
  if (!dtype_valid(msg[6])) return invalid_message("unknown element type " + std::to_string(msg[6]));
  h.dtype = static_cast<DType>(msg[6]);
  h.flags = msg[7];
  if ((h.flags & ~kKnownFlags) != 0) {
    return invalid_message("unknown flag bits " + std::to_string(h.flags & ~kKnownFlags));
  }
  h.count = load_u64(msg + 8);
  h.bits = load_u32(msg + 16);
  h.bucket = load_u32(msg + 20);
  h.k = load_u64(msg + kKAt);
  h.seed = load_u64(msg + 32);
  h.step = load_u64(msg + 40);
  h.payload_bytes = load_u64(msg + kPayloadBytesAt);
  if (h.count > kMaxCount) {
    return invalid_message("element count " + std::to_string(h.count) + " exceeds the limit 2^48");
  }
  if (h.payload_bytes != len - kHeaderBytes) {
    return invalid_message("header promises " + std::to_string(h.payload_bytes) +
                           " payload bytes but the message carries " + std::to_string(len - kHeaderBytes));
  }
  return h;
}

}  // namespace gw::wire
