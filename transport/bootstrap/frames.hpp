// The frames of the rendezvous protocol (root_server.cpp documents them byte by byte).
// Little-endian throughout; everything read from a socket is checked against these bounds
// before it is trusted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gw::bootstrap::frames {

constexpr uint8_t kHelloMagic[4] = {'G', 'W', 'B', 'H'};
constexpr uint8_t kReplyMagic[4] = {'G', 'W', 'B', 'R'};
constexpr uint16_t kVersion = 1;

constexpr size_t kHelloFixed = 36;   // hello up to (not including) the blob
constexpr size_t kReplyHeader = 16;  // reply up to (not including) the payload

constexpr uint32_t kMaxBlob = 64 * 1024;
constexpr uint32_t kMaxRanks = 65536;
constexpr uint32_t kMaxErrorText = 4096;

// Reply kinds.
constexpr uint16_t kTable = 1;
constexpr uint16_t kError = 2;
constexpr uint16_t kProgress = 3;

// Error codes carried by an error reply.
constexpr uint32_t kErrRejected = 1;  // bad rank/nranks/blob, duplicate rank, nranks mismatch
constexpr uint32_t kErrTimeout = 2;   // the root's deadline passed before every rank arrived
constexpr uint32_t kErrVersion = 3;   // the hello's protocol version is not ours
constexpr uint32_t kErrShutdown = 4;  // the process hosting the root is exiting
constexpr uint32_t kErrComplete = 5;  // the job is already complete

constexpr size_t kProgressPayload = 8;    // arrived u32, nranks u32
constexpr size_t kErrorPayloadFixed = 12;  // code u32, arrived u32, nranks u32

inline void put_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
inline void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint16_t get_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
inline uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// The fixed part of a hello.
struct HelloFixed {
  uint8_t magic[4];
  uint16_t version;
  uint16_t flags;
  uint8_t token[16];
  uint32_t rank;
  uint32_t nranks;
  uint32_t blob_len;
};
HelloFixed parse_hello_fixed(const uint8_t* p);  // p holds kHelloFixed bytes
std::string encode_hello(const uint8_t token[16], uint32_t rank, uint32_t nranks, const std::string& blob,
                         uint16_t version = kVersion);

struct ReplyHeader {
  uint8_t magic[4];
  uint16_t version;
  uint16_t kind;
  uint64_t payload_len;
};
ReplyHeader parse_reply_header(const uint8_t* p);  // p holds kReplyHeader bytes

std::string encode_table(const std::vector<std::string>& blobs);
std::string encode_error(uint32_t code, uint32_t arrived, uint32_t nranks, const std::string& text);
std::string encode_progress(uint32_t arrived, uint32_t nranks);

// The most a table payload for nranks may hold (nranks u32, then a u32 length and at most
// kMaxBlob bytes per rank).
inline uint64_t max_table_payload(uint32_t nranks) { return 4 + uint64_t{nranks} * (4 + kMaxBlob); }

}  // namespace gw::bootstrap::frames
