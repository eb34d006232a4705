// Device scratch memory an encoder reuses from call to call, like compressors/workspace.hpp
// for the host: each slot grows to the largest size asked of it and is never shrunk, so a
// steady training loop allocates nothing. Growing frees the old block with cudaFree, which
// waits for work in flight, so a kernel still reading the old block is never cut short.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gradwire/status.hpp"

namespace gw::kern {

class DeviceScratch {
 public:
  static constexpr int kSlots = 8;

  DeviceScratch() = default;
  ~DeviceScratch();
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;

  // Device memory for count elements of T in slot, 256-byte aligned; contents undefined.
  template <class T>
  Result<T*> get(int slot, size_t count) {
    Result<void*> p = raw(slot, count * sizeof(T));
    if (!p) return p.status();
    return static_cast<T*>(*p);
  }
  // Pinned host memory (slot-less, one block) for results the host must read back.
  Result<void*> host(size_t bytes);
  size_t bytes_held() const;

 private:
  Result<void*> raw(int slot, size_t bytes);

  void* slots_[kSlots] = {};
  size_t sizes_[kSlots] = {};
  void* host_ = nullptr;
  size_t host_bytes_ = 0;
};

}  // namespace gw::kern
