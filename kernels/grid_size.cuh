// Grid sizes from the occupancy the compiled kernel really has on the current device:
// cudaOccupancyMaxActiveBlocksPerMultiprocessor (registers, shared memory, launch bounds)
// times the SM count is the largest grid that runs in one wave. A fixed guess (8 blocks per
// SM) overshoots a kernel of 40 registers, which fits 6: the last third of the grid then
// runs as a second, mostly idle wave.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/cuda_check.hpp"
#include "gradwire/status.hpp"

namespace gw::kern {

// Blocks of `kernel` (threads per block, dynamic shared memory in bytes) resident on the
// whole current device at once; at least 1. The occupancy query is made once per (device,
// kernel, threads, smem) and thread; the SM count is asked each time (an attribute the
// runtime keeps, no driver round trip), so a stand-in device that changes it is followed.
template <class Kernel>
Result<uint64_t> resident_blocks(Kernel kernel, int threads, size_t smem = 0) {
  struct Entry {
    int device;
    Kernel kernel;
    int threads;
    size_t smem;
    int per_sm;
  };
  thread_local std::vector<Entry> cache;
  int device = 0;
  GW_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  int per_sm = -1;
  for (const Entry& e : cache) {
    if (e.device == device && e.kernel == kernel && e.threads == threads && e.smem == smem) per_sm = e.per_sm;
  }
  if (per_sm < 0) {
    GW_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
    cache.push_back(Entry{device, kernel, threads, smem, per_sm});
  }
  int sms = 0;
  GW_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  // 0 means the kernel cannot launch with these resources; the launch itself then says why.
  return static_cast<uint64_t>(per_sm > 0 ? per_sm : 1) * static_cast<uint64_t>(sms > 0 ? sms : 1);
}

// Blocks for a grid-stride loop over `items` work items, `per_block` of them per block per
// iteration (usually the block's thread count): enough for the work, at most one wave.
template <class Kernel>
Result<unsigned> grid_for(Kernel kernel, int threads, uint64_t items, uint64_t per_block, size_t smem = 0) {
  GW_ASSIGN_OR_RETURN(const uint64_t wave, resident_blocks(kernel, threads, smem));
  const uint64_t want = per_block > 0 ? (items + per_block - 1) / per_block : 1;
  const uint64_t blocks = want < wave ? want : wave;
  return static_cast<unsigned>(blocks > 0 ? blocks : 1);
}

}  // namespace gw::kern
