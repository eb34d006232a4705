#include "transport/bootstrap/frames.hpp"

#include <cstring>

namespace gw::bootstrap::frames {
namespace {

std::string reply(uint16_t kind, uint64_t payload_len) {
  std::string out(kReplyHeader, '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  std::memcpy(p, kReplyMagic, 4);
  put_u16(p + 4, kVersion);
  put_u16(p + 6, kind);
  put_u64(p + 8, payload_len);
  return out;
}

void append_u32(std::string& s, uint32_t v) {
  uint8_t b[4];
  put_u32(b, v);
  s.append(reinterpret_cast<const char*>(b), 4);
}

}  // namespace

HelloFixed parse_hello_fixed(const uint8_t* p) {
  HelloFixed h{};
  std::memcpy(h.magic, p, 4);
  h.version = get_u16(p + 4);
  h.flags = get_u16(p + 6);
  std::memcpy(h.token, p + 8, 16);
  h.rank = get_u32(p + 24);
  h.nranks = get_u32(p + 28);
  h.blob_len = get_u32(p + 32);
  return h;
}

std::string encode_hello(const uint8_t token[16], uint32_t rank, uint32_t nranks, const std::string& blob,
                         uint16_t version) {
  std::string out(kHelloFixed, '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  std::memcpy(p, kHelloMagic, 4);
  put_u16(p + 4, version);
  put_u16(p + 6, 0);
  std::memcpy(p + 8, token, 16);
  put_u32(p + 24, rank);
  put_u32(p + 28, nranks);
  put_u32(p + 32, static_cast<uint32_t>(blob.size()));
  out += blob;
  return out;
}

ReplyHeader parse_reply_header(const uint8_t* p) {
  ReplyHeader h{};
  std::memcpy(h.magic, p, 4);
  h.version = get_u16(p + 4);
  h.kind = get_u16(p + 6);
  h.payload_len = get_u64(p + 8);
  return h;
}

std::string encode_table(const std::vector<std::string>& blobs) {
  uint64_t payload = 4;
  for (const auto& b : blobs) payload += 4 + b.size();
  std::string out = reply(kTable, payload);
  out.reserve(kReplyHeader + payload);
  append_u32(out, static_cast<uint32_t>(blobs.size()));
  for (const auto& b : blobs) {
    append_u32(out, static_cast<uint32_t>(b.size()));
    out += b;
  }
  return out;
}

std::string encode_error(uint32_t code, uint32_t arrived, uint32_t nranks, const std::string& text) {
  const std::string t = text.substr(0, kMaxErrorText);
  std::string out = reply(kError, kErrorPayloadFixed + t.size());
  append_u32(out, code);
  append_u32(out, arrived);
  append_u32(out, nranks);
  out += t;
  return out;
}

std::string encode_progress(uint32_t arrived, uint32_t nranks) {
  std::string out = reply(kProgress, kProgressPayload);
  append_u32(out, arrived);
  append_u32(out, nranks);
  return out;
}

}  // namespace gw::bootstrap::frames
