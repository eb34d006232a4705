// The fixed 56-byte little-endian header that starts every compressed message.
// Byte layout in docs/wire-format.md; change one and the other together.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gradwire/codec.hpp"
#include "gradwire/status.hpp"

namespace gw::wire {

constexpr size_t kHeaderBytes = 56;
constexpr uint8_t kMagic[4] = {'G', 'W', 'R', 'E'};
constexpr uint8_t kVersion = 1;
constexpr uint8_t kFlagNearestRounding = 0x01;  // qsgd: deterministic rounding was used
constexpr uint8_t kKnownFlags = kFlagNearestRounding;
// Largest element count a message may claim: keeps every size computation far from overflow.
constexpr uint64_t kMaxCount = uint64_t{1} << 48;
// Byte offsets of the fields that a device-side count fills in or a length is read from.
constexpr unsigned kKAt = 24;
constexpr unsigned kPayloadBytesAt = 48;

struct Header {
  CodecId codec = CodecId::kNone;
  DType dtype = DType::kFloat32;
  uint8_t flags = 0;
  uint64_t count = 0;
  uint32_t bits = 0;
  uint32_t bucket = 0;
  uint64_t k = 0;
  uint64_t seed = 0;
  uint64_t step = 0;
  uint64_t payload_bytes = 0;
};

void write_header(const Header& header, uint8_t* out);
// Parses and checks everything the header alone can prove: magic, version, known codec,
// dtype and flags, count in range, and len == header + payload. Codec parameters are
// checked by the codec's own validator.
Result<Header> read_header(const uint8_t* msg, size_t len);
// The length (header + payload) that an untrusted header states, from at least its first 56
// bytes: only the checks that need no payload (size, magic, version) are made.
Result<uint64_t> stated_length(const uint8_t* msg, size_t len);
// The length (header + payload) that the header of a message this library encoded gives,
// from a copy of its first `copied` >= 56 bytes (a device encode's upper bound): for
// messages whose length only the device knew. An error if it exceeds `copied`.
Result<size_t> encoded_length(const uint8_t* head, size_t copied);

inline void store_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
inline void store_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void store_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
inline uint64_t load_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
inline void store_f32(uint8_t* p, float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  store_u32(p, u);
}
inline float load_f32(const uint8_t* p) {
  const uint32_t u = load_u32(p);
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

// a * b and a + b, or false on overflow.
inline bool mul_ok(uint64_t a, uint64_t b, uint64_t& out) { return !__builtin_mul_overflow(a, b, &out); }
inline bool add_ok(uint64_t a, uint64_t b, uint64_t& out) { return !__builtin_add_overflow(a, b, &out); }

}  // namespace gw::wire
