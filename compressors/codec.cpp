// The parts of every codec that do not depend on which codec it is: argument checks,
// the header, error feedback, and decoding by the codec id a message names.
#include "gradwire/codec.hpp"

#include <cstring>
#include <string>

#include "compressors/codec_registry.hpp"
#include "compressors/element_io.hpp"
#include "compressors/wire_header.hpp"
#include "compressors/workspace.hpp"
#include "gradwire/ef_state.hpp"

namespace gw {

Codec::Codec(const CodecSpec& spec) : spec_(spec), workspace_(std::make_unique<Workspace>()) {}
Codec::~Codec() = default;

Result<std::unique_ptr<Codec>> Codec::create(std::string_view text) {
  GW_ASSIGN_OR_RETURN(CodecSpec spec, CodecSpec::parse(text));
  return create(spec);
}

Result<std::unique_ptr<Codec>> Codec::create(const CodecSpec& spec) {
  const detail::CodecEntry* entry = detail::find_codec(spec.id);
  if (entry == nullptr) return invalid_argument("unknown codec id");
  // Round trip through the text form: it is where every range check lives.
  GW_ASSIGN_OR_RETURN(CodecSpec checked, CodecSpec::parse(spec.to_string()));
  return entry->make(checked);
}

bool Codec::accepts(DType dtype) const { return dtype == DType::kFloat32; }

Status Codec::check_encode_args(const void* src, size_t n, DType dtype, const void* out, size_t cap) const {
  if (!dtype_valid(static_cast<int>(dtype))) return invalid_argument("dtype is not a gw_dtype_t");
  if (!accepts(dtype)) {
    return unsupported(std::string("codec ") + codec_name(id()) + " does not take " + dtype_name(dtype) +
                       " input (lossy codecs take float32)");
  }
  if (n > wire::kMaxCount) return invalid_argument("count " + std::to_string(n) + " exceeds 2^48");
  if (src == nullptr && n > 0) return invalid_argument("src is null");
  if (out == nullptr) return invalid_argument("dst is null");
  const size_t need = max_encoded_bytes(n, dtype);
  if (cap < need) {
    return buffer_too_small("dst capacity " + std::to_string(cap) + " bytes is below the " + std::to_string(need) +
                            " that max_encoded_bytes promises");
  }
  return Status::ok();
}

namespace {

// A message: the header (codec, dtype, count, and what payload() fills in), then the payload
// that payload(header, where) writes and measures.
template <class Payload>
Result<size_t> framed(CodecId codec, DType dtype, size_t n, void* out, Payload&& payload) {
  wire::Header header;
  header.codec = codec;
  header.dtype = dtype;
  header.count = n;
  auto* bytes = static_cast<uint8_t*>(out);
  GW_ASSIGN_OR_RETURN(size_t payload_bytes, payload(header, bytes + wire::kHeaderBytes));
  header.payload_bytes = payload_bytes;
  wire::write_header(header, bytes);
  return wire::kHeaderBytes + payload_bytes;
}

// Error feedback: what the message carries leaves the residual.
Status subtract_sent(const void* msg, size_t len, float* acc, size_t n) {
  return decode(msg, len, acc, n, DType::kFloat32, DecodeMode::kSubtract).with_context("error feedback");
}

}  // namespace

Result<size_t> Codec::encode(const void* src, size_t n, DType dtype, const EncodeContext& ctx, void* out, size_t cap) {
  GW_RETURN_IF_ERROR(check_encode_args(src, n, dtype, out, cap));
  return framed(id(), dtype, n, out, [&](wire::Header& header, uint8_t* payload) {
    return encode_payload(src, n, dtype, ctx, header, payload);
  });
}

Result<size_t> Codec::encode_accumulated(float* acc, size_t n, const EncodeContext& ctx, void* out, size_t cap) {
  if (acc == nullptr && n > 0) return invalid_argument("residual buffer is null");
  GW_ASSIGN_OR_RETURN(size_t written, encode(acc, n, DType::kFloat32, ctx, out, cap));
  GW_RETURN_IF_ERROR(subtract_sent(out, written, acc, n));
  return written;
}

Result<size_t> Codec::encode_payload_adding(float* acc, const float* add, size_t n, const EncodeContext& ctx,
                                            wire::Header& header, uint8_t* out) {
  detail::add_into(acc, add, n);
  return encode_payload(acc, n, DType::kFloat32, ctx, header, out);
}

Result<size_t> Codec::encode_adding(float* acc, const float* add, size_t n, const EncodeContext& ctx, void* out,
                                    size_t cap) {
  if (acc == nullptr && n > 0) return invalid_argument("residual buffer is null");
  GW_RETURN_IF_ERROR(check_encode_args(add, n, DType::kFloat32, out, cap));
  GW_ASSIGN_OR_RETURN(size_t written,
                      framed(id(), DType::kFloat32, n, out, [&](wire::Header& header, uint8_t* payload) {
                        return encode_payload_adding(acc, add, n, ctx, header, payload);
                      }));
  GW_RETURN_IF_ERROR(subtract_sent(out, written, acc, n));
  return written;
}

Result<size_t> Codec::encode(const float* src, size_t n, const EncodeContext& ctx, ErrorFeedback& ef, void* out,
                             size_t cap) {
  if (ef.count() != n) {
    return invalid_argument("error-feedback state holds " + std::to_string(ef.count()) + " elements but count is " +
                            std::to_string(n));
  }
  GW_ASSIGN_OR_RETURN(size_t written, encode_adding(ef.residual(), src, n, ctx, out, cap));
  ef.advance();
  return written;
}

namespace {

struct Validated {
  wire::Header header;
  const detail::CodecEntry* entry;
  uint64_t nnz;
};

Result<Validated> validate(const void* msg, size_t len) {
  GW_ASSIGN_OR_RETURN(wire::Header header, wire::read_header(static_cast<const uint8_t*>(msg), len));
  const detail::CodecEntry* entry = detail::find_codec(header.codec);
  if (entry == nullptr) return invalid_message("unknown codec id");
  uint64_t nnz = 0;
  const auto* payload = static_cast<const uint8_t*>(msg) + wire::kHeaderBytes;
  GW_RETURN_IF_ERROR(entry->validate(header, payload, nnz).with_context(entry->name));
  return Validated{header, entry, nnz};
}

}  // namespace

Status decode(const void* msg, size_t len, void* dst, size_t n, DType dtype, DecodeMode mode) {
  if (!dtype_valid(static_cast<int>(dtype))) return invalid_argument("dtype is not a gw_dtype_t");
  if (static_cast<int>(mode) > static_cast<int>(DecodeMode::kSubtract)) {
    return invalid_argument("mode is not a gw_decode_mode_t");
  }
  if (dst == nullptr && n > 0) return invalid_argument("dst is null");
  GW_ASSIGN_OR_RETURN(Validated v, validate(msg, len));
  if (v.header.count != n) {
    return invalid_message("message decodes to " + std::to_string(v.header.count) +
                           " elements but the destination holds " + std::to_string(n));
  }
  if (!v.entry->has(detail::kCapAnyDtype) && dtype != DType::kFloat32) {
    return unsupported(std::string(v.entry->name) + " messages decode into float32 only, not " + dtype_name(dtype));
  }
  const auto* payload = static_cast<const uint8_t*>(msg) + wire::kHeaderBytes;
  v.entry->apply(v.header, payload, dst, dtype, mode);
  return Status::ok();
}

Result<MessageInfo> inspect(const void* msg, size_t len) {
  GW_ASSIGN_OR_RETURN(Validated v, validate(msg, len));
  MessageInfo info;
  info.codec = v.header.codec;
  info.dtype = v.header.dtype;
  info.count = v.header.count;
  info.nnz = v.nnz;
  info.total_bytes = len;
  return info;
}

}  // namespace gw
