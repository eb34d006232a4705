#include "compressors/workspace.hpp"

namespace gw {

void* Workspace::raw(int slot, size_t bytes) {
  Buffer& b = slots_[slot];
  if (b.bytes < bytes) {
    b.data.reset();  // free first: peak memory stays at one buffer
    b.data.reset(new uint8_t[bytes]);
    b.bytes = bytes;
  }
  return b.data.get();
}

size_t Workspace::bytes_held() const {
  size_t total = 0;
  for (const Buffer& b : slots_) total += b.bytes;
  return total;
}

}  // namespace gw
