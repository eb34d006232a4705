#include "kernels/device_scratch.hpp"

#include <cuda_runtime_api.h>

#include <string>

#include "kernels/cuda_check.hpp"

namespace gw::kern {

DeviceScratch::~DeviceScratch() {
  for (void* p : slots_) cudaFree(p);
  cudaFreeHost(host_);
}

Result<void*> DeviceScratch::raw(int slot, size_t bytes) {
  if (slot < 0 || slot >= kSlots) return internal_error("device scratch slot " + std::to_string(slot) + " is out of range");
  if (bytes <= sizes_[slot] && slots_[slot] != nullptr) return slots_[slot];
  // Grow by at least half again so that slowly growing requests do not reallocate each time.
  const size_t want = bytes > sizes_[slot] + sizes_[slot] / 2 ? bytes : sizes_[slot] + sizes_[slot] / 2;
  GW_CUDA_RETURN_IF_ERROR(cudaFree(slots_[slot]));
  slots_[slot] = nullptr;
  sizes_[slot] = 0;
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, want > 0 ? want : 1);
  if (err != cudaSuccess) {
    cudaGetLastError();  // cudaMalloc's error is not sticky; clear it for later launch checks
    return Status(err == cudaErrorMemoryAllocation ? Code::kOutOfMemory : Code::kCuda,
                  "device scratch: cudaMalloc of " + std::to_string(want) + " bytes failed: " +
                      cudaGetErrorString(err));
  }
  slots_[slot] = p;
  sizes_[slot] = want;
  return p;
}

Result<void*> DeviceScratch::host(size_t bytes) {
  if (bytes <= host_bytes_ && host_ != nullptr) return host_;
  GW_CUDA_RETURN_IF_ERROR(cudaFreeHost(host_));
  host_ = nullptr;
  host_bytes_ = 0;
  void* p = nullptr;
  GW_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&p, bytes > 0 ? bytes : 1, cudaHostAllocDefault));
  host_ = p;
  host_bytes_ = bytes;
  return p;
}

size_t DeviceScratch::bytes_held() const {
  size_t total = host_bytes_;
  for (size_t s : sizes_) total += s;
  return total;
}

}  // namespace gw::kern
