// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the rendezvous handshake: small,
// portable, no library dependency. Not for bulk data; the bootstrap hashes kilobytes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gw::bootstrap {

constexpr size_t kSha256Bytes = 32;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  // Writes the digest; the object must not be updated afterwards.
  void final(uint8_t out[kSha256Bytes]);

 private:
  void block(const uint8_t* p);

  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;  // bytes hashed so far
};

void sha256(const void* data, size_t n, uint8_t out[kSha256Bytes]);

class HmacSha256 {
 public:
  HmacSha256(const void* key, size_t key_len);
  void update(const void* data, size_t n) { inner_.update(data, n); }
  void final(uint8_t out[kSha256Bytes]);

 private:
  Sha256 inner_, outer_;
};

void hmac_sha256(const void* key, size_t key_len, const void* data, size_t n, uint8_t out[kSha256Bytes]);

// Compares n bytes in a time that does not depend on where they differ.
bool equal_constant_time(const uint8_t* a, const uint8_t* b, size_t n);

}  // namespace gw::bootstrap
