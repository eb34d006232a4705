// Scratch memory an encoder reuses from call to call: each slot grows to the largest size
// asked of it and is never shrunk, so a steady training loop allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace gw {

class Workspace {
 public:
  static constexpr int kSlots = 8;

  template <class T>
  T* get(int slot, size_t count) {
    return static_cast<T*>(raw(slot, count * sizeof(T)));
  }
  size_t bytes_held() const;

 private:
  void* raw(int slot, size_t bytes);

  struct Buffer {
    std::unique_ptr<uint8_t[]> data;
    size_t bytes = 0;
  };
  Buffer slots_[kSlots];
};

}  // namespace gw
