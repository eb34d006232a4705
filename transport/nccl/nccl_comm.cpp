#include "transport/nccl/nccl_comm.hpp"

#include <atomic>
#include <cstring>
#include <string>
#include <thread>

#include "common/cuda_check.hpp"
#include "transport/nccl/nccl_library.hpp"

namespace gw::nccl {

static_assert(sizeof(ncclUniqueId) == kUniqueIdBytes, "NCCL unique id size changed");

namespace {

using std::chrono::microseconds;

// Enqueue and completion usually take microseconds: poll hot for a while, then nap.
constexpr int kSpins = 64;
constexpr microseconds kNap{50};
constexpr microseconds kInitNap{100};

class Backoff {
 public:
  Backoff(int spins, microseconds nap) : spins_(spins), nap_(nap) {}
  void pause() {
    if (spins_ > 0) {
      --spins_;
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(nap_);
    }
  }

 private:
  int spins_;
  microseconds nap_;
};

Code code_for(ncclResult_t r) {
  switch (r) {
    case ncclUnhandledCudaError: return Code::kCuda;
    case ncclInvalidArgument:
    case ncclInvalidUsage: return Code::kInvalidArgument;
    default: return Code::kRemote;  // system, internal, remote: the group is broken
  }
}

// NCCL documents invalid argument and invalid usage as "the call had no effect".
bool is_fatal(ncclResult_t r) { return r != ncclInvalidArgument && r != ncclInvalidUsage; }

Status nccl_error(const Library& lib, ncclComm_t comm, ncclResult_t r, const std::string& what) {
  std::string msg = "NCCL: " + what + ": " + lib.get_error_string(r);
  const char* last = lib.get_last_error(comm);
  if (last != nullptr && last[0] != '\0') msg += std::string(" (") + last + ")";
  return Status(code_for(r), std::move(msg));
}

// Polls comm's state until it leaves ncclInProgress; ncclInProgress if the deadline came first.
// Also returns ncclInProgress as soon as *stop is set.
ncclResult_t poll_state(const Library& lib, ncclComm_t comm, Clock::time_point deadline,
                        const std::function<void()>& progress, Backoff backoff, const std::atomic<bool>* stop) {
  for (;;) {
    if (stop != nullptr && stop->load(std::memory_order_acquire)) return ncclInProgress;
    ncclResult_t state = ncclInProgress;
    const ncclResult_t r = lib.comm_get_async_error(comm, &state);
    if (r != ncclSuccess) return r;
    if (state != ncclInProgress) return state;
    if (Clock::now() >= deadline) return ncclInProgress;
    if (progress) progress();
    backoff.pause();
  }
}

std::string who(int rank, int nranks) { return "rank " + std::to_string(rank) + " of " + std::to_string(nranks); }

}  // namespace

Status get_unique_id(uint8_t out[kUniqueIdBytes]) {
  if (out == nullptr) return invalid_argument("NCCL unique id: null output");
  GW_ASSIGN_OR_RETURN(const Library* lib, load_library());
  ncclUniqueId uid;
  const ncclResult_t r = lib->get_unique_id(&uid);
  if (r != ncclSuccess) return nccl_error(*lib, nullptr, r, "ncclGetUniqueId");
  std::memcpy(out, uid.internal, kUniqueIdBytes);
  return Status::ok();
}

Result<std::unique_ptr<Comm>> Comm::create(const uint8_t id[kUniqueIdBytes], int nranks, int rank,
                                           Clock::time_point deadline, const std::function<void()>& progress) {
  if (id == nullptr || nranks < 1 || rank < 0 || rank >= nranks) {
    return invalid_argument("NCCL init: bad arguments (" + who(rank, nranks) + ")");
  }
  GW_ASSIGN_OR_RETURN(const Library* lib, load_library());
  ncclUniqueId uid;
  std::memcpy(uid.internal, id, kUniqueIdBytes);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = lib->comm_init_rank_config(&comm, nranks, uid, rank, &config);
  // Nonblocking init can answer ncclSuccess while the communicator is still in progress.
  if (r == ncclSuccess || r == ncclInProgress) {
    r = poll_state(*lib, comm, deadline, progress, Backoff(0, kInitNap), nullptr);
  }
  if (r != ncclSuccess) {
    Status why = r == ncclInProgress
                     ? Status(Code::kTimeout, "NCCL init (" + who(rank, nranks) + ") did not finish by the deadline")
                     : nccl_error(*lib, comm, r, "init (" + who(rank, nranks) + ")");
    if (comm != nullptr) lib->comm_abort(comm);
    return why;
  }
  cudaEvent_t event = nullptr;
  const cudaError_t e = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    lib->comm_abort(comm);
    return kern::cuda_status(e, "NCCL init: cudaEventCreateWithFlags");
  }
  return std::unique_ptr<Comm>(new Comm(lib, comm, event, nranks, rank));
}

Comm::Comm(const Library* lib, ncclComm* comm, cudaEvent_t event, int nranks, int rank)
    : lib_(lib), comm_(comm), event_(event), nranks_(nranks), rank_(rank) {}

Comm::~Comm() {
  if (comm_ != nullptr) (void)close(Clock::now() + kCloseTimeout);
  cudaEventDestroy(event_);
}

Status Comm::close(Clock::time_point deadline, const std::function<void()>& progress) {
  if (comm_ == nullptr) return closed_ ? Status::ok() : error_;  // or aborted (ncclCommAbort freed it)
  ncclResult_t r = lib_->comm_finalize(comm_);
  if (r == ncclSuccess || r == ncclInProgress) {
    r = poll_state(*lib_, comm_, deadline, progress, Backoff(kSpins, kNap), &stop_);
  }
  if (r != ncclSuccess) {
    if (stop_.load(std::memory_order_acquire)) return fail(Status(Code::kAborted, "NCCL: communicator aborted"));
    return fail(r == ncclInProgress ? Status(Code::kTimeout,
                                             "NCCL: ncclCommFinalize did not finish by the "
                                             "deadline; communicator aborted")
                                    : nccl_error(*lib_, comm_, r, "ncclCommFinalize"));
  }
  // Finalized: the destroy frees local resources only and does not block.
  const ncclResult_t d = lib_->comm_destroy(comm_);
  comm_ = nullptr;
  if (d != ncclSuccess) {
    error_ = nccl_error(*lib_, nullptr, d, "ncclCommDestroy");
    return error_;
  }
  closed_ = true;
  error_ = Status(Code::kAborted, "NCCL: communicator closed");  // what later calls get
  return Status::ok();
}

int Comm::version() const { return lib_->version; }

void Comm::abort() {
  if (comm_ != nullptr) {
    lib_->comm_abort(comm_);
    comm_ = nullptr;
  }
  if (error_.is_ok()) error_ = Status(Code::kAborted, "NCCL: communicator aborted");
}

Status Comm::fail(Status why) {
  if (error_.is_ok()) error_ = std::move(why);
  abort();
  return error_;
}

Status Comm::check_usable() {
  if (stop_.load(std::memory_order_acquire)) return fail(Status(Code::kAborted, "NCCL: communicator aborted"));
  return error_;
}

void Comm::request_abort() { stop_.store(true, std::memory_order_release); }

Status Comm::after_call(int result, const char* what, Clock::time_point deadline,
                        const std::function<void()>& progress) {
  const auto r = static_cast<ncclResult_t>(result);
  // ncclInProgress: NCCL is still enqueuing in the background, and until the state is
  // ncclSuccess it forbids the next NCCL call and any kernel on this stream, so settle here.
  if (r == ncclInProgress) return settle(what, deadline, progress);
  if (r == ncclSuccess) return Status::ok();
  Status why = nccl_error(*lib_, comm_, r, what);
  return is_fatal(r) ? fail(std::move(why)) : why;
}

Status Comm::settle(const char* what, Clock::time_point deadline, const std::function<void()>& progress) {
  const ncclResult_t r = poll_state(*lib_, comm_, deadline, progress, Backoff(kSpins, kNap), &stop_);
  if (r == ncclSuccess) return Status::ok();
  if (stop_.load(std::memory_order_acquire)) return fail(Status(Code::kAborted, "NCCL: communicator aborted"));
  if (r == ncclInProgress) {
    return fail(Status(Code::kTimeout,
                       std::string("NCCL: ") + what + " still enqueuing at the deadline; communicator aborted"));
  }
  return fail(nccl_error(*lib_, comm_, r, what));
}

namespace {

// NCCL's names for a reduction's dtype and op; what = the call, for the error.
Status nccl_reduction(DType dtype, ReduceOp op, const char* what, ncclDataType_t* type, ncclRedOp_t* red) {
  switch (dtype) {
    case DType::kFloat32: *type = ncclFloat32; break;
    case DType::kFloat16: *type = ncclFloat16; break;
    case DType::kBFloat16: *type = ncclBfloat16; break;
    case DType::kFloat64: *type = ncclFloat64; break;
    case DType::kInt8: *type = ncclInt8; break;
    case DType::kUInt8: *type = ncclUint8; break;
    case DType::kInt32: *type = ncclInt32; break;
    case DType::kInt64: *type = ncclInt64; break;
    default:
      return unsupported(std::string("NCCL ") + what + ": dtype " + std::to_string(int(dtype)) + " has no NCCL type");
  }
  const bool integer =
      dtype == DType::kInt8 || dtype == DType::kUInt8 || dtype == DType::kInt32 || dtype == DType::kInt64;
  switch (op) {
    case ReduceOp::kSum: *red = ncclSum; break;
    case ReduceOp::kProd: *red = ncclProd; break;
    case ReduceOp::kMin: *red = ncclMin; break;
    case ReduceOp::kMax: *red = ncclMax; break;
    case ReduceOp::kAvg:
      // gradwire's integer average is the wrapped sum divided toward zero; NCCL's is not
      // documented to be: the caller stages integer averages through host memory.
      if (integer) return unsupported(std::string("NCCL ") + what + ": avg of " + dtype_name(dtype) + " is not NCCL's");
      *red = ncclAvg;
      break;
    default: return unsupported(std::string("NCCL ") + what + ": op " + std::to_string(int(op)) + " has no NCCL op");
  }
  return Status::ok();
}

}  // namespace

Status Comm::allreduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, cudaStream_t stream,
                       Clock::time_point deadline, const std::function<void()>& progress) {
  GW_RETURN_IF_ERROR(check_usable());
  ncclDataType_t type;
  ncclRedOp_t red;
  GW_RETURN_IF_ERROR(nccl_reduction(dtype, op, "allreduce", &type, &red));
  return after_call(lib_->all_reduce(send, recv, count, type, red, comm_, stream), "ncclAllReduce", deadline, progress);
}

Status Comm::reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op,
                            cudaStream_t stream, Clock::time_point deadline, const std::function<void()>& progress) {
  GW_RETURN_IF_ERROR(check_usable());
  ncclDataType_t type;
  ncclRedOp_t red;
  GW_RETURN_IF_ERROR(nccl_reduction(dtype, op, "reduce-scatter", &type, &red));
  return after_call(lib_->reduce_scatter(send, recv, recv_count, type, red, comm_, stream), "ncclReduceScatter",
                    deadline, progress);
}

Status Comm::allgather(const void* send, void* recv, size_t bytes, cudaStream_t stream, Clock::time_point deadline,
                       const std::function<void()>& progress) {
  GW_RETURN_IF_ERROR(check_usable());
  return after_call(lib_->all_gather(send, recv, bytes, ncclUint8, comm_, stream), "ncclAllGather", deadline, progress);
}

Status Comm::broadcast(void* buf, size_t bytes, int root, cudaStream_t stream, Clock::time_point deadline,
                       const std::function<void()>& progress) {
  GW_RETURN_IF_ERROR(check_usable());
  if (root < 0 || root >= nranks_) {
    return invalid_argument("NCCL broadcast: root " + std::to_string(root) + " not in " + who(rank_, nranks_));
  }
  return after_call(lib_->broadcast(buf, buf, bytes, ncclUint8, root, comm_, stream), "ncclBroadcast", deadline,
                    progress);
}

Status Comm::wait(cudaStream_t stream, Clock::time_point deadline, const std::function<void()>& progress) {
  GW_RETURN_IF_ERROR(check_usable());
  GW_RETURN_IF_ERROR(kern::cuda_status(cudaEventRecord(event_, stream), "NCCL wait: cudaEventRecord"));
  Backoff backoff(kSpins, kNap);
  for (;;) {
    if (stop_.load(std::memory_order_acquire)) return fail(Status(Code::kAborted, "NCCL: communicator aborted"));
    const cudaError_t done = cudaEventQuery(event_);
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = lib_->comm_get_async_error(comm_, &state);
    if (r != ncclSuccess) return fail(nccl_error(*lib_, comm_, r, "ncclCommGetAsyncError"));
    if (state != ncclSuccess && state != ncclInProgress) {
      return fail(nccl_error(*lib_, comm_, state, "asynchronous error"));
    }
    if (done == cudaSuccess) return Status::ok();
    if (done != cudaErrorNotReady) return fail(kern::cuda_status(done, "NCCL wait: cudaEventQuery"));
    if (Clock::now() >= deadline) {
      return fail(
          Status(Code::kTimeout, "NCCL: work on the stream not finished at the deadline; communicator aborted"));
    }
    if (progress) progress();
    backoff.pause();
  }
}

}  // namespace gw::nccl
