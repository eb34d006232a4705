// Host<->device copies as a training loop makes them: cudaMemcpyAsync on the caller's stream
// through pinned staging. A pageable cudaMemcpy runs on the legacy stream and waits for the
// device, which can hide a missing wait in the code under test; here an upload returns with
// its last chunk still queued, ordered only by the stream.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace gw::testing {

class PinnedCopier {
 public:
  // Staging is two pinned chunks of at most chunk_bytes, so huge copies need no huge pinned
  // allocation.
  explicit PinnedCopier(cudaStream_t stream, size_t chunk_bytes = size_t{32} << 20)
      : stream_(stream), chunk_(chunk_bytes) {}
  ~PinnedCopier() {
    for (int b = 0; b < 2; ++b) {
      if (done_[b] != nullptr) {
        cudaEventSynchronize(done_[b]);
        cudaEventDestroy(done_[b]);
      }
      if (buf_[b] != nullptr) cudaFreeHost(buf_[b]);
    }
  }
  PinnedCopier(const PinnedCopier&) = delete;
  PinnedCopier& operator=(const PinnedCopier&) = delete;

  cudaStream_t stream() const { return stream_; }

  // Enqueues the copy of src to device memory dst on the stream and returns without waiting
  // for the last chunk (earlier chunks free their staging before it is reused).
  cudaError_t upload(void* dst, const void* src, size_t bytes) {
    auto* d = static_cast<unsigned char*>(dst);
    const auto* s = static_cast<const unsigned char*>(src);
    for (size_t off = 0, i = 0; off < bytes; ++i) {
      const size_t len = std::min(chunk_, bytes - off);
      const int b = static_cast<int>(i % 2);
      if (cudaError_t e = slot(b, len)) return e;
      std::memcpy(buf_[b], s + off, len);
      if (cudaError_t e = cudaMemcpyAsync(d + off, buf_[b], len, cudaMemcpyHostToDevice, stream_)) return e;
      if (cudaError_t e = cudaEventRecord(done_[b], stream_)) return e;
      off += len;
    }
    return cudaSuccess;
  }

  // Copies device memory src to dst after the work queued on the stream, and waits for it.
  cudaError_t download(void* dst, const void* src, size_t bytes) {
    auto* d = static_cast<unsigned char*>(dst);
    const auto* s = static_cast<const unsigned char*>(src);
    for (size_t off = 0; off < bytes;) {
      const size_t len = std::min(chunk_, bytes - off);
      if (cudaError_t e = slot(0, len)) return e;
      if (cudaError_t e = cudaMemcpyAsync(buf_[0], s + off, len, cudaMemcpyDeviceToHost, stream_)) return e;
      if (cudaError_t e = cudaEventRecord(done_[0], stream_)) return e;
      if (cudaError_t e = cudaEventSynchronize(done_[0])) return e;
      std::memcpy(d + off, buf_[0], len);
      off += len;
    }
    return cudaSuccess;
  }

 private:
  // Staging b, free (its last copy done) and at least len bytes.
  cudaError_t slot(int b, size_t len) {
    if (done_[b] == nullptr) {
      if (cudaError_t e = cudaEventCreateWithFlags(&done_[b], cudaEventDisableTiming)) return e;
    } else if (cudaError_t e = cudaEventSynchronize(done_[b])) {
      return e;
    }
    if (size_[b] >= len) return cudaSuccess;
    if (buf_[b] != nullptr) cudaFreeHost(buf_[b]);
    buf_[b] = nullptr;
    size_[b] = 0;
    if (cudaError_t e = cudaMallocHost(&buf_[b], len)) return e;
    size_[b] = len;
    return cudaSuccess;
  }

  cudaStream_t stream_;
  size_t chunk_;
  void* buf_[2] = {nullptr, nullptr};
  size_t size_[2] = {0, 0};
  cudaEvent_t done_[2] = {nullptr, nullptr};
};

}  // namespace gw::testing
