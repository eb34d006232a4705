// The step that keys the random stream of one message inside a lossy collective, so that
// no two messages of a call reuse random words: base step (the EF state's, or the call's
// sequence number) in the high bits, then the hop and the chunk.
#pragma once

#include <cstdint>

namespace gw::coll {

inline uint64_t message_step(uint64_t base, uint32_t hop, uint32_t chunk) {
  return (base << 24) | (static_cast<uint64_t>(hop & 0xff) << 16) | (chunk & 0xffff);
}

}  // namespace gw::coll
