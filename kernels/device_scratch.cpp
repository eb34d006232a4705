#include "kernels/device_scratch.hpp"

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/log.hpp"

namespace gw::kern {

Result<bool> memory_pools_supported() {
  static std::mutex mu;
  static std::vector<int> answers;  // by device ordinal: -1 not asked yet, else the attribute
  int device = 0;
  GW_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mu);
  if (answers.size() <= static_cast<size_t>(device)) answers.resize(static_cast<size_t>(device) + 1, -1);
  int& answer = answers[static_cast<size_t>(device)];
  if (answer < 0) {
    int v = 0;
    GW_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&v, cudaDevAttrMemoryPoolsSupported, device));
    answer = v != 0 ? 1 : 0;
    if (answer == 0) {
      GW_WARN(kInit,
              "CUDA device %d has no memory pools (cudaDevAttrMemoryPoolsSupported is 0): device scratch falls "
              "back to cudaMalloc, and each release waits for its stream before cudaFree (correct, slower)",
              device);
    }
  }
  return answer == 1;
}

namespace {

struct External {
  DeviceAllocFn alloc = nullptr;
  DeviceFreeFn free = nullptr;
  void* user = nullptr;
};
struct ExternalBlock {
  External from;
  int device;
};

std::mutex& external_mu() {
  static std::mutex mu;
  return mu;
}
External& external() {
  static External e;
  return e;
}
// Blocks the caller's allocator gave, and which one (it may be replaced meanwhile).
std::map<void*, ExternalBlock>& external_blocks() {
  static auto* m = new std::map<void*, ExternalBlock>();  // never destroyed: freed at exit too
  return *m;
}

}  // namespace

void set_device_allocator(DeviceAllocFn alloc, DeviceFreeFn free, void* user) {
  std::lock_guard<std::mutex> lock(external_mu());
  external() = (alloc != nullptr && free != nullptr) ? External{alloc, free, user} : External{};
}

cudaError_t stream_alloc(void** p, size_t bytes, cudaStream_t stream, cudaMemPool_t pool, bool pools) {
  {
    std::lock_guard<std::mutex> lock(external_mu());
    const External e = external();
    if (e.alloc != nullptr) {
      int device = 0;
      if (const cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return err;
      *p = e.alloc(bytes, device, stream, e.user);
      if (*p == nullptr) return cudaErrorMemoryAllocation;
      external_blocks()[*p] = ExternalBlock{e, device};
      return cudaSuccess;
    }
  }
  if (!pools) return cudaMalloc(p, bytes);
  return pool != nullptr ? cudaMallocFromPoolAsync(p, bytes, pool, stream) : cudaMallocAsync(p, bytes, stream);
}

cudaError_t stream_release(void* p, cudaStream_t stream, bool pools) {
  {
    std::lock_guard<std::mutex> lock(external_mu());
    auto it = external_blocks().find(p);
    if (it != external_blocks().end()) {
      const ExternalBlock b = it->second;
      external_blocks().erase(it);
      b.from.free(p, b.device, stream, b.from.user);
      return cudaSuccess;
    }
  }
  if (pools) return cudaFreeAsync(p, stream);
  // No stream-ordered free: work already queued on the stream may still use p, so wait for
  // it. cudaFree is then safe (it may wait for the whole device too; that is the slow part).
  const cudaError_t waited = cudaStreamSynchronize(stream);
  const cudaError_t freed = cudaFree(p);
  return waited != cudaSuccess ? waited : freed;
}

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
    if (p != nullptr) stream_release(p, stream_, pools_);
  }
}

Result<void*> DeviceScratch::raw(int slot, size_t bytes) {
  if (slot < 0 || slot >= kSlots)
    return internal_error("device scratch slot " + std::to_string(slot) + " is out of range");
  if (bytes <= sizes_[slot] && slots_[slot] != nullptr) return slots_[slot];
  if (!ready_) {
    GW_ASSIGN_OR_RETURN(pools_, memory_pools_supported());
    if (pools_) {
      GW_ASSIGN_OR_RETURN(pool_, scratch_pool());
    }
    ready_ = true;
  }
  if (slots_[slot] != nullptr) GW_CUDA_RETURN_IF_ERROR(stream_release(slots_[slot], stream_, pools_));
  slots_[slot] = nullptr;
  sizes_[slot] = 0;
  void* p = nullptr;
  const size_t want = bytes > 0 ? (bytes + 255) / 256 * 256 : 256;
  const cudaError_t err = stream_alloc(&p, want, stream_, pool_, pools_);
  if (err != cudaSuccess) {
    cudaGetLastError();  // an allocation failure is not sticky; clear it for later launch checks
    return Status(err == cudaErrorMemoryAllocation ? Code::kOutOfMemory : Code::kCuda,
                  std::string("device scratch: ") + (pools_ ? "cudaMallocFromPoolAsync" : "cudaMalloc") + " of " +
                      std::to_string(want) + " bytes failed: " + cudaGetErrorString(err));
  }
  slots_[slot] = p;
  sizes_[slot] = want;
  return p;
}

}  // namespace gw::kern
