// What the collectives need of an accelerator to run on its buffers: one in-order stream of
// work (copies, codec kernels, small element-wise kernels) that the progress thread enqueues
// and polls through fences, pinned host memory to stage messages for a transport that cannot
// read device memory, and optionally NCCL for the dense collectives. The CUDA build
// implements it (collectives/algorithms/device/cuda_backend.cpp); the tests also run the device algorithms on a
// host-memory stand-in, so their orchestration is checked where there is no GPU.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "compressors/wire_header.hpp"
#include "gradwire/codec.hpp"
#include "gradwire/communicator.hpp"
#include "gradwire/status.hpp"

namespace gw::coll {

// What mark() returns: an opaque point on one stream, of the backend that made it.
class StreamMark {
 public:
  virtual ~StreamMark() = default;
};

class DeviceBackend {
 public:
  using Fence = uint64_t;
  virtual ~DeviceBackend() = default;

  virtual const char* name() const = 0;
  // Ok when p is memory this backend's kernels may read and write.
  virtual Status check_buffer(const void* p, const char* what) const = 0;
  // A point on a caller's stream (a cudaStream_t; null: the legacy default stream), taken in
  // the calling thread when a call is made, so the call's work starts after what the caller
  // had queued then and not after what it queues later. Any thread; never waits.
  virtual Result<std::shared_ptr<StreamMark>> mark(void* stream) = 0;
  // Progress thread: orders the next call's work after the mark, without a host wait.
  virtual Status begin(const StreamMark& mark) = 0;

  // Completion words: the communicator numbers its calls and, as each one finishes (with any
  // result), signals its number here (host side, progress thread). stream_wait enqueues on a
  // caller's stream a wait until the number reached value (cyclic: (int32)(word - value) >= 0),
  // so that stream's later work runs after the call, with no host wait. Any thread.
  virtual void signal(uint32_t value) = 0;
  virtual Status stream_wait(void* stream, uint32_t value) = 0;

  // Gives back the scratch and staging memory kept between calls (progress thread, between
  // calls); the next call that needs it allocates it again.
  virtual Status trim() = 0;

  // Grow-only buffers kept between calls: device scratch and pinned host staging.
  virtual Result<void*> device_scratch(int slot, size_t bytes) = 0;
  virtual Result<uint8_t*> host_staging(int slot, size_t bytes) = 0;

  // Enqueued work, in order.
  virtual Status copy(void* dst, const void* src, size_t bytes) = 0;  // any direction
  virtual Status zero(void* dst, size_t bytes) = 0;
  virtual Status add(float* acc, const float* x, size_t n) = 0;  // acc += x
  // owner += sum / divisor (divisor 1: sum), then sum = 0: the owner-side residual update.
  virtual Status fold_owner(float* owner, float* sum, size_t n, int divisor) = 0;
  virtual Status divide(float* x, size_t n, int divisor) = 0;
  // The host codec's encode (same bytes) of n float32 at src, into out (device, cap bytes).
  // Returns the bytes to copy down: the message's length, or for a codec whose length only
  // the device learns (dgc) the most it can be; the exact length is then in the header
  // (wire::encoded_length on the staged copy). Enqueues only.
  virtual Result<size_t> encode_input(const Codec& codec, const float* src, size_t n, const EncodeContext& ctx,
                                      void* out, size_t cap) = 0;
  // encode_accumulated: on return acc holds what the message failed to carry.
  virtual Result<size_t> encode_accumulated(const Codec& codec, float* acc, size_t n, const EncodeContext& ctx,
                                            void* out, size_t cap) = 0;
  // Applies a message (device memory, len bytes) whose host copy was validated in full.
  virtual Status apply(const wire::Header& header, const uint8_t* msg, size_t len, float* dst, DecodeMode mode) = 0;

  // Waits on the host for everything enqueued so far (a failed collective returns only once
  // nothing it enqueued can still write the caller's buffers). NCCL work, which could wait on
  // a dead peer, has been waited for or aborted before this is called.
  virtual Status quiesce() = 0;

  // A point in the stream after everything enqueued so far, and whether it was reached.
  virtual Result<Fence> fence() = 0;
  virtual Result<bool> reached(Fence fence) = 0;

  // NCCL for the dense collectives, once nccl_join succeeded. Enqueued like the rest.
  virtual bool nccl_ready() const { return false; }
  virtual Status nccl_unique_id(uint8_t* out, size_t bytes) {
    (void)out;
    (void)bytes;
    return unsupported(std::string(name()) + " has no NCCL");
  }
  virtual Status nccl_join(const uint8_t* id, size_t bytes, int nranks, int rank,
                           std::chrono::steady_clock::time_point deadline, const std::function<void()>& progress) {
    (void)id, (void)bytes, (void)nranks, (void)rank, (void)deadline, (void)progress;
    return unsupported(std::string(name()) + " has no NCCL");
  }
  // Drops this rank's NCCL communicator (a join that another rank failed).
  virtual void nccl_leave() {}
  // Enqueue on the stream; each may wait (bounded by deadline, calling progress) for NCCL
  // to accept the work. nccl_wait then waits for the stream, watching NCCL's errors.
  using Progress = std::function<void()>;
  using Deadline = std::chrono::steady_clock::time_point;
  virtual Status nccl_allreduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, Deadline deadline,
                                const Progress& progress) {
    (void)send, (void)recv, (void)count, (void)dtype, (void)op, (void)deadline, (void)progress;
    return unsupported("NCCL is not enabled on this communicator");
  }
  virtual Status nccl_allgather(const void* send, void* recv, size_t bytes, Deadline deadline,
                                const Progress& progress) {
    (void)send, (void)recv, (void)bytes, (void)deadline, (void)progress;
    return unsupported("NCCL is not enabled on this communicator");
  }
  virtual Status nccl_broadcast(void* buf, size_t bytes, int root, Deadline deadline, const Progress& progress) {
    (void)buf, (void)bytes, (void)root, (void)deadline, (void)progress;
    return unsupported("NCCL is not enabled on this communicator");
  }
  virtual Status nccl_wait(Deadline deadline, const Progress& progress) {
    (void)deadline, (void)progress;
    return unsupported("NCCL is not enabled on this communicator");
  }
  // A second NCCL communicator among the ranks of this rank's node (the hierarchical
  // all-reduce's legs inside a node), joined like the first (ids from nccl_unique_id).
  virtual bool node_nccl_ready() const { return false; }
  virtual Status node_nccl_join(const uint8_t* id, size_t bytes, int nranks, int rank, Deadline deadline,
                                const Progress& progress) {
    (void)id, (void)bytes, (void)nranks, (void)rank, (void)deadline, (void)progress;
    return unsupported(std::string(name()) + " has no NCCL");
  }
  virtual void node_nccl_leave() {}
  // recv (recv_count elements) = op over the node's ranks of block `local rank` of send
  // (node size * recv_count elements).
  virtual Status node_nccl_reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op,
                                          Deadline deadline, const Progress& progress) {
    (void)send, (void)recv, (void)recv_count, (void)dtype, (void)op, (void)deadline, (void)progress;
    return unsupported("NCCL is not enabled inside this node");
  }
  virtual Status node_nccl_allgather(const void* send, void* recv, size_t bytes, Deadline deadline,
                                     const Progress& progress) {
    (void)send, (void)recv, (void)bytes, (void)deadline, (void)progress;
    return unsupported("NCCL is not enabled inside this node");
  }
  // As nccl_wait, watching the node communicator's errors.
  virtual Status node_nccl_wait(Deadline deadline, const Progress& progress) {
    (void)deadline, (void)progress;
    return unsupported("NCCL is not enabled inside this node");
  }
  // Stops whatever the backend has in flight that could wait on dead peers (NCCL).
  virtual void abort() {}
};

// The CUDA backend on the current device, or why there is none (no CUDA in this build, no
// driver, no device).
Result<std::unique_ptr<DeviceBackend>> make_cuda_backend();

}  // namespace gw::coll
