#include "kernels/device_scratch.hpp"

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cuda_check.hpp"

namespace gw::kern {

Result<cudaMemPool_t> scratch_pool() {
  static std::mutex mu;
  static std::vector<cudaMemPool_t> pools;  // by device ordinal
  int device = 0;
  GW_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mu);
  if (pools.size() <= static_cast<size_t>(device)) pools.resize(static_cast<size_t>(device) + 1, nullptr);
  cudaMemPool_t& pool = pools[static_cast<size_t>(device)];
  if (pool != nullptr) return pool;
  // A pool of our own rather than the device's default one, whose settings belong to the
  // application.
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t made = nullptr;
  GW_CUDA_RETURN_IF_ERROR(cudaMemPoolCreate(&made, &props));
  uint64_t keep = UINT64_MAX;
  const cudaError_t err = cudaMemPoolSetAttribute(made, cudaMemPoolAttrReleaseThreshold, &keep);
  if (err != cudaSuccess) {
    cudaMemPoolDestroy(made);
    return cuda_status(err, "cudaMemPoolSetAttribute (release threshold)");
  }
  pool = made;
  return pool;
}

DeviceScratch::~DeviceScratch() {
  for (void* p : slots_) {
    if (p != nullptr) cudaFreeAsync(p, stream_);
  }
}

Result<void*> DeviceScratch::raw(int slot, size_t bytes) {
  if (slot < 0 || slot >= kSlots) return internal_error("device scratch slot " + std::to_string(slot) + " is out of range");
  if (bytes <= sizes_[slot] && slots_[slot] != nullptr) return slots_[slot];
  if (pool_ == nullptr) {
    GW_ASSIGN_OR_RETURN(pool_, scratch_pool());
  }
  if (slots_[slot] != nullptr) GW_CUDA_RETURN_IF_ERROR(cudaFreeAsync(slots_[slot], stream_));
  slots_[slot] = nullptr;
  sizes_[slot] = 0;
  void* p = nullptr;
  const size_t want = bytes > 0 ? (bytes + 255) / 256 * 256 : 256;
  const cudaError_t err = cudaMallocFromPoolAsync(&p, want, pool_, stream_);
  if (err != cudaSuccess) {
    cudaGetLastError();  // an allocation failure is not sticky; clear it for later launch checks
    return Status(err == cudaErrorMemoryAllocation ? Code::kOutOfMemory : Code::kCuda,
                  "device scratch: cudaMallocFromPoolAsync of " + std::to_string(want) + " bytes failed: " +
                      cudaGetErrorString(err));
  }
  slots_[slot] = p;
  sizes_[slot] = want;
  return p;
}

}  // namespace gw::kern
