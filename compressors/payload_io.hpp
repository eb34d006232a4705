// Reads and writes payload elements. Payload bytes are little-endian and may sit at any
// alignment inside a caller's buffer, so access goes through memcpy (which compiles to
// plain loads and stores on the little-endian hosts gradwire supports).
#pragma once

#include <cstdint>
#include <cstring>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "gradwire's wire format assumes a little-endian host");

namespace gw::detail {

template <class T>
inline T load_le(const uint8_t* p, uint64_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}

template <class T>
inline void store_le(uint8_t* p, uint64_t i, T v) {
  std::memcpy(p + i * sizeof(T), &v, sizeof(T));
}

}  // namespace gw::detail
