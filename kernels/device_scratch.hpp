// Device scratch memory for one encode, stream-ordered: blocks come from gradwire's memory
// pool on the device current when the scratch is made (cudaMallocFromPoolAsync on the
// caller's stream) and go back to it in stream order when the scratch is destroyed
// (cudaFreeAsync). So two encodes on two streams never share a block, nothing waits for
// the device (no cudaFree, which waits for every stream and could stall behind a trainer's
// kernel), and memory follows the device the work runs on. The pool keeps what it was
// given (release threshold unlimited), so a steady training loop asks the driver for
// nothing: its allocations are pool hits. A device without memory pools gets cudaMalloc'd
// blocks instead, and each release waits for the stream (stream_release).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "gradwire/status.hpp"

namespace gw::kern {

// gradwire's scratch pool on the current device, made on first use (per device, never
// destroyed: it lives as long as the CUDA context).
Result<cudaMemPool_t> scratch_pool();

// Whether the current device has stream-ordered allocation (cudaDevAttrMemoryPoolsSupported),
// asked once per device; a device without it is named once in a warning. Without pools the
// two calls below fall back to cudaMalloc and, on release, a wait for the stream and cudaFree:
// correct, but every release waits for the device.
Result<bool> memory_pools_supported();
// The caller's device allocator (gw_set_device_allocator; e.g. torch's caching allocator):
// while set, stream_alloc takes from it. Null functions: gradwire's own again. Each block is
// given back to the allocator that gave it.
using DeviceAllocFn = void* (*)(size_t bytes, int device, void* stream, void* user);
using DeviceFreeFn = void (*)(void* p, int device, void* stream, void* user);
void set_device_allocator(DeviceAllocFn alloc, DeviceFreeFn free, void* user);

// Device memory usable in `stream`'s order: from the caller's allocator when one is set, else
// from `pool` (the device's default pool when null) with pools, else cudaMalloc.
cudaError_t stream_alloc(void** p, size_t bytes, cudaStream_t stream, cudaMemPool_t pool, bool pools);
// Releases what stream_alloc gave after the work queued on `stream` that may use it.
cudaError_t stream_release(void* p, cudaStream_t stream, bool pools);

class DeviceScratch {
 public:
  static constexpr int kSlots = 8;

  explicit DeviceScratch(cudaStream_t stream = nullptr) : stream_(stream) {}
  ~DeviceScratch();
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;

  cudaStream_t stream() const { return stream_; }

  // Device memory for count elements of T in slot (aligned for any type, as cudaMallocAsync
  // aligns), contents undefined. A
  // slot asked for more than it holds is released (in stream order, after the work already
  // queued that uses it) and replaced.
  template <class T>
  Result<T*> get(int slot, size_t count) {
    Result<void*> p = raw(slot, count * sizeof(T));
    if (!p) return p.status();
    return static_cast<T*>(*p);
  }

 private:
  Result<void*> raw(int slot, size_t bytes);

  cudaStream_t stream_;
  bool ready_ = false;  // pools_ and pool_ known
  bool pools_ = true;
  cudaMemPool_t pool_ = nullptr;
  void* slots_[kSlots] = {};
  size_t sizes_[kSlots] = {};
};

}  // namespace gw::kern
