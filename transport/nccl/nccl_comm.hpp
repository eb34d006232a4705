// One rank's NCCL communicator, nonblocking, for dense collectives on CUDA device memory.
// Every wait is bounded by a deadline and keeps the caller's own transport alive through a
// progress callback. Errors are sticky: after the first fatal one the communicator is
// aborted and every later call returns that error.
//
// Threading: one thread uses a Comm (abort() included); request_abort() is for other threads.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "gradwire/status.hpp"
#include "gradwire/types.hpp"

struct ncclComm;  // <nccl.h> stays out of this header

namespace gw::nccl {

struct Library;
using Clock = std::chrono::steady_clock;

constexpr size_t kUniqueIdBytes = 128;  // sizeof(ncclUniqueId), checked in nccl_comm.cpp

// A fresh NCCL unique id (rank 0 makes it, every rank passes it to Comm::create).
Status get_unique_id(uint8_t out[kUniqueIdBytes]);

class Comm {
 public:
  // Joins the communicator of nranks ranks named by id, on the current CUDA device. Polls the
  // nonblocking init, calling progress() between polls; past deadline aborts it (kTimeout).
  static Result<std::unique_ptr<Comm>> create(const uint8_t id[kUniqueIdBytes], int nranks, int rank,
                                              Clock::time_point deadline, const std::function<void()>& progress);
  // close() with a deadline kCloseTimeout away and no progress callback, unless close() or
  // abort() already ran. NCCL's teardown is an intra-node collective: every rank on this node
  // should close (or destroy) its Comm.
  ~Comm();
  static constexpr std::chrono::seconds kCloseTimeout{10};
  // ncclCommFinalize, then polls the communicator's state (calling progress() between polls)
  // until NCCL says the work is flushed and the peers are done with it, then ncclCommDestroy,
  // which no longer blocks. An NCCL error, the deadline or request_abort() ends it with
  // ncclCommAbort instead (and returns why). An aborted communicator only needed the abort.
  // Idempotent: later calls return the first outcome. Collectives after it fail.
  Status close(Clock::time_point deadline, const std::function<void()>& progress = nullptr);
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  // Enqueue on stream. When NCCL answers ncclInProgress the call polls (with deadline and
  // progress, as wait does) until the work is on the stream, so on OK the caller may put its
  // own kernels on the stream next. f32, f16 and bf16; kSum and kAvg.
  Status allreduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, cudaStream_t stream,
                   Clock::time_point deadline = Clock::time_point::max(),
                   const std::function<void()>& progress = nullptr);
  // recv (recv_count elements) = op over the ranks of block `rank` of send (nranks *
  // recv_count elements); recv may be that block of send. The dtypes and ops of allreduce.
  Status reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op, cudaStream_t stream,
                        Clock::time_point deadline = Clock::time_point::max(),
                        const std::function<void()>& progress = nullptr);
  // recv (nranks * bytes) = every rank's send block, in rank order.
  Status allgather(const void* send, void* recv, size_t bytes, cudaStream_t stream,
                   Clock::time_point deadline = Clock::time_point::max(),
                   const std::function<void()>& progress = nullptr);
  Status broadcast(void* buf, size_t bytes, int root, cudaStream_t stream,
                   Clock::time_point deadline = Clock::time_point::max(),
                   const std::function<void()>& progress = nullptr);

  // Waits for the work enqueued so far on stream without blocking in CUDA: polls an event
  // and NCCL's async error, calling progress() between polls. An NCCL error aborts the
  // communicator and is returned; past deadline the communicator is aborted (kTimeout).
  Status wait(cudaStream_t stream, Clock::time_point deadline, const std::function<void()>& progress);

  // ncclCommAbort; idempotent. Later calls return kAborted (or the earlier error).
  void abort();
  // Any thread: the owning thread's current or next wait stops, aborts the communicator and
  // returns kAborted (a communicator torn down by gw_comm_abort while NCCL waits).
  void request_abort();

  int version() const;
  int size() const { return nranks_; }
  int rank() const { return rank_; }
  // The sticky first failure, or OK.
  const Status& error() const { return error_; }

 private:
  Comm(const Library* lib, ncclComm* comm, cudaEvent_t event, int nranks, int rank);

  Status check_usable();
  // Turns an NCCL return code into a Status; fatal ones abort the communicator first.
  Status after_call(int result, const char* what, Clock::time_point deadline, const std::function<void()>& progress);
  // Polls until the communicator leaves ncclInProgress.
  Status settle(const char* what, Clock::time_point deadline, const std::function<void()>& progress);
  Status fail(Status why);

  const Library* lib_;
  ncclComm* comm_;       // null once closed or aborted
  bool closed_ = false;  // by a close() that finalized and destroyed it
  cudaEvent_t event_;
  int nranks_;
  int rank_;
  Status error_;
  std::atomic<bool> stop_{false};
};

}  // namespace gw::nccl
