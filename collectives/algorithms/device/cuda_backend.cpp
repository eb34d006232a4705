// The CUDA device backend of the collectives (collectives/algorithms/device/device_backend.hpp): one
// non-blocking stream on the device current when it was made, stream-ordered scratch
// (cudaMallocAsync; cudaMalloc where the device has no memory pools), pinned staging, fences
// as recycled events, the device codecs, and NCCL (transport/nccl/) when the build found it
// and the communicator brought it up.
#include <cuda_runtime_api.h>

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "collectives/algorithms/device/device_backend.hpp"
#include "common/cuda_check.hpp"
#include "kernels/collective_kernels.hpp"
#include "kernels/device_codec.hpp"
#include "kernels/device_scratch.hpp"
#include "kernels/testing_hooks.hpp"
#ifdef GW_HAVE_NCCL
#include "transport/nccl/nccl_comm.hpp"
#endif

namespace gw::kern::testing_hooks {
std::atomic<bool> skip_caller_wait{false};
}  // namespace gw::kern::testing_hooks

namespace gw::coll {
namespace {

using kern::cuda_status;

class CudaBackend final : public DeviceBackend {
 public:
  static Result<std::unique_ptr<DeviceBackend>> create() {
    GW_RETURN_IF_ERROR(kern::device_ready());
    int device = 0;
    GW_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
    std::unique_ptr<CudaBackend> b(new CudaBackend(device));
    GW_ASSIGN_OR_RETURN(b->pools_, kern::memory_pools_supported());
    GW_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&b->stream_, cudaStreamNonBlocking));
    // The completion word: pinned, mapped into the device's address space, read by waits the
    // callers' streams make (stream_wait).
    void* word = nullptr;
    GW_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&word, 64, cudaHostAllocMapped | cudaHostAllocPortable));
    b->word_ = static_cast<uint32_t*>(word);
    *b->word_ = 0;
    void* on_device = nullptr;
    GW_CUDA_RETURN_IF_ERROR(cudaHostGetDevicePointer(&on_device, word, 0));
    b->word_on_device_ = static_cast<uint32_t*>(on_device);
    b->wait_value_ = driver_wait_value32();
    return std::unique_ptr<DeviceBackend>(std::move(b));
  }

  ~CudaBackend() override {
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    if (word_ != nullptr) {
      // No caller's stream may wait forever on a backend that is gone: every wait passes, and
      // cudaFreeHost waits for the device before the word goes.
      std::lock_guard<std::mutex> lock(wait_mu_);
      if (any_wait_) signal(max_waited_);
    }
#ifdef GW_HAVE_NCCL
    node_nccl_.reset();
    nccl_.reset();
#endif
    for (auto& s : scratch_) cudaFree(s.ptr);
    for (auto& s : staging_) cudaFreeHost(s.ptr);
    for (auto& f : pending_) cudaEventDestroy(f.second);
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    if (word_ != nullptr) cudaFreeHost(word_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  const char* name() const override { return "cuda"; }

  Status check_buffer(const void* p, const char* what) const override {
    cudaPointerAttributes attr{};
    const cudaError_t err = cudaPointerGetAttributes(&attr, p);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return invalid_argument(std::string(what) + " is not CUDA memory");
    }
    if (attr.type == cudaMemoryTypeManaged) return Status::ok();
    if (attr.type != cudaMemoryTypeDevice) {
      return invalid_argument(std::string(what) + " is not device memory (cudaMalloc or managed)");
    }
    if (attr.device != device_) {
      return invalid_argument(std::string(what) + " is on CUDA device " + std::to_string(attr.device) +
                              "; this communicator's device collectives run on device " + std::to_string(device_));
    }
    return Status::ok();
  }

  // An event recorded on the caller's stream, from a pool (any thread).
  Result<std::shared_ptr<StreamMark>> mark(void* stream) override {
    cudaEvent_t e = marks_->take();
    if (e == nullptr) {
      int current = 0;
      GW_CUDA_RETURN_IF_ERROR(cudaGetDevice(&current));
      if (current != device_) GW_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
      const cudaError_t made = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
      if (current != device_) cudaSetDevice(current);  // the caller's device stays its own
      GW_RETURN_IF_ERROR(cuda_status(made, "cudaEventCreateWithFlags"));
    }
    auto m = std::make_shared<CudaMark>(this, marks_, e);
    GW_RETURN_IF_ERROR(cuda_status(cudaEventRecord(e, static_cast<cudaStream_t>(stream)),
                                   "cudaEventRecord on the caller's stream (is it a stream of the communicator's "
                                   "device?)"));
    return std::shared_ptr<StreamMark>(std::move(m));
  }

  Status begin(const StreamMark& mark) override {
    GW_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));  // the progress thread's current device
    const auto* m = dynamic_cast<const CudaMark*>(&mark);
    if (m == nullptr || m->owner != this) return internal_error("a stream mark of another device backend");
    if (kern::testing_hooks::skip_caller_wait.load(std::memory_order_relaxed)) return Status::ok();
    GW_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, m->event, 0));
    return Status::ok();
  }

  void signal(uint32_t value) override {
    // The device work of the call that finished is complete (the collectives quiesce before
    // they return), so a stream released by this store reads finished results.
    __atomic_store_n(word_, value, __ATOMIC_RELEASE);
  }

  Status stream_wait(void* stream, uint32_t value) override {
    {
      std::lock_guard<std::mutex> lock(wait_mu_);
      if (!any_wait_ || static_cast<int32_t>(value - max_waited_) > 0) max_waited_ = value;
      any_wait_ = true;
    }
    auto* s = static_cast<cudaStream_t>(stream);
    if (WaitValue32 wait = wait_value_.load(); wait != nullptr) {
      if (wait(s, reinterpret_cast<unsigned long long>(word_on_device_), value, kWaitValueGeq) == 0)
        return Status::ok();
      wait_value_.store(nullptr);  // the driver refused stream memory operations: poll with a kernel
    }
    return kern::launch_wait_word(word_on_device_, value, s);
  }

  Status trim() override {
    GW_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    GW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    for (auto& b : scratch_) {
      if (b.ptr != nullptr) GW_CUDA_RETURN_IF_ERROR(kern::stream_release(b.ptr, stream_, pools_));
      b = Block{};
    }
    for (auto& b : staging_) {
      if (b.ptr != nullptr) GW_CUDA_RETURN_IF_ERROR(cudaFreeHost(b.ptr));
      b = Block{};
    }
    encoders_.clear();
    return cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  Result<void*> device_scratch(int slot, size_t bytes) override {
    Block& b = block(scratch_, slot);
    if (b.bytes >= bytes && b.ptr != nullptr) return b.ptr;
    // Stream-ordered: the old block is released after the work already queued that uses it.
    // Without memory pools the release waits for the stream (kern::stream_release).
    if (b.ptr != nullptr) GW_CUDA_RETURN_IF_ERROR(kern::stream_release(b.ptr, stream_, pools_));
    b = Block{};
    void* p = nullptr;
    GW_CUDA_RETURN_IF_ERROR(kern::stream_alloc(&p, bytes > 0 ? bytes : 1, stream_, nullptr, pools_));
    b = Block{p, bytes};
    return p;
  }

  Result<uint8_t*> host_staging(int slot, size_t bytes) override {
    Block& b = block(staging_, slot);
    if (b.bytes >= bytes && b.ptr != nullptr) return static_cast<uint8_t*>(b.ptr);
    if (b.ptr != nullptr) {
      // Copies queued earlier may still read it; staging only grows in the first calls.
      GW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
      GW_CUDA_RETURN_IF_ERROR(cudaFreeHost(b.ptr));
    }
    b = Block{};
    void* p = nullptr;
    GW_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&p, bytes > 0 ? bytes : 1, cudaHostAllocDefault));
    b = Block{p, bytes};
    return static_cast<uint8_t*>(p);
  }

  Status copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return Status::ok();
    return cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), "cudaMemcpyAsync");
  }
  Status zero(void* dst, size_t bytes) override {
    if (bytes == 0) return Status::ok();
    return cuda_status(cudaMemsetAsync(dst, 0, bytes, stream_), "cudaMemsetAsync");
  }
  Status add(float* acc, const float* x, size_t n) override { return kern::launch_add(acc, x, n, stream_); }
  Status fold_owner(float* owner, float* sum, size_t n, int divisor) override {
    return kern::launch_fold_owner(owner, sum, n, divisor, stream_);
  }
  Status divide(float* x, size_t n, int divisor) override { return kern::launch_divide(x, n, divisor, stream_); }

  Result<size_t> encode_input(const Codec& codec, const float* src, size_t n, const EncodeContext& ctx, void* out,
                              size_t cap) override {
    GW_ASSIGN_OR_RETURN(kern::DeviceEncoder * enc, encoder(codec));
    GW_ASSIGN_OR_RETURN(kern::EncodedSize size, enc->encode(src, n, DType::kFloat32, ctx, nullptr, out, cap, stream_));
    return size.bytes;
  }
  Result<size_t> encode_accumulated(const Codec& codec, float* acc, size_t n, const EncodeContext& ctx, void* out,
                                    size_t cap) override {
    GW_ASSIGN_OR_RETURN(kern::DeviceEncoder * enc, encoder(codec));
    GW_ASSIGN_OR_RETURN(kern::EncodedSize size, enc->encode_accumulated(acc, n, ctx, out, cap, stream_));
    return size.bytes;
  }
  Status apply(const wire::Header& header, const uint8_t* msg, size_t len, float* dst, DecodeMode mode) override {
    if (len < wire::kHeaderBytes) return internal_error("a validated message is shorter than its header");
    return kern::apply_validated(header, msg + wire::kHeaderBytes, dst, DType::kFloat32, mode, stream_);
  }

  Status quiesce() override { return cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

  Result<Fence> fence() override {
    cudaEvent_t e = nullptr;
    if (!free_events_.empty()) {
      e = free_events_.back();
      free_events_.pop_back();
    } else {
      GW_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
    const cudaError_t err = cudaEventRecord(e, stream_);
    if (err != cudaSuccess) {
      free_events_.push_back(e);
      return cuda_status(err, "cudaEventRecord");
    }
    pending_.emplace_back(++issued_, e);
    return issued_;
  }

  Result<bool> reached(Fence f) override {
    // The stream runs in order: events complete front to back.
    while (!pending_.empty()) {
      const cudaError_t q = cudaEventQuery(pending_.front().second);
      if (q == cudaErrorNotReady) break;
      if (q != cudaSuccess) return cuda_status(q, "cudaEventQuery (device work of a collective failed)");
      completed_ = pending_.front().first;
      free_events_.push_back(pending_.front().second);
      pending_.pop_front();
    }
    return completed_ >= f;
  }

#ifdef GW_HAVE_NCCL
  bool nccl_ready() const override { return nccl_ != nullptr; }
  Status nccl_unique_id(uint8_t* out, size_t bytes) override {
    if (bytes != nccl::kUniqueIdBytes) return internal_error("NCCL unique id size mismatch");
    return nccl::get_unique_id(out);
  }
  Status nccl_join(const uint8_t* id, size_t bytes, int nranks, int rank,
                   std::chrono::steady_clock::time_point deadline, const std::function<void()>& progress) override {
    if (bytes != nccl::kUniqueIdBytes) return internal_error("NCCL unique id size mismatch");
    GW_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    nccl_leave();
    GW_ASSIGN_OR_RETURN(std::unique_ptr<nccl::Comm> made, nccl::Comm::create(id, nranks, rank, deadline, progress));
    std::lock_guard<std::mutex> lock(nccl_mu_);
    nccl_ = std::move(made);
    return Status::ok();
  }
  void nccl_leave() override {
    std::unique_ptr<nccl::Comm> gone;
    std::lock_guard<std::mutex> lock(nccl_mu_);
    gone = std::move(nccl_);
  }
  Status nccl_allreduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, Deadline deadline,
                        const Progress& progress) override {
    return nccl_->allreduce(send, recv, count, dtype, op, stream_, deadline, progress);
  }
  Status nccl_allgather(const void* send, void* recv, size_t bytes, Deadline deadline,
                        const Progress& progress) override {
    return nccl_->allgather(send, recv, bytes, stream_, deadline, progress);
  }
  Status nccl_broadcast(void* buf, size_t bytes, int root, Deadline deadline, const Progress& progress) override {
    return nccl_->broadcast(buf, bytes, root, stream_, deadline, progress);
  }
  Status nccl_wait(Deadline deadline, const Progress& progress) override {
    return nccl_->wait(stream_, deadline, progress);
  }
  bool node_nccl_ready() const override { return node_nccl_ != nullptr; }
  Status node_nccl_join(const uint8_t* id, size_t bytes, int nranks, int rank, Deadline deadline,
                        const Progress& progress) override {
    if (bytes != nccl::kUniqueIdBytes) return internal_error("NCCL unique id size mismatch");
    GW_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    node_nccl_leave();
    GW_ASSIGN_OR_RETURN(std::unique_ptr<nccl::Comm> made, nccl::Comm::create(id, nranks, rank, deadline, progress));
    std::lock_guard<std::mutex> lock(nccl_mu_);
    node_nccl_ = std::move(made);
    return Status::ok();
  }
  void node_nccl_leave() override {
    std::unique_ptr<nccl::Comm> gone;
    std::lock_guard<std::mutex> lock(nccl_mu_);
    gone = std::move(node_nccl_);
  }
  Status node_nccl_reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op,
                                  Deadline deadline, const Progress& progress) override {
    return node_nccl_->reduce_scatter(send, recv, recv_count, dtype, op, stream_, deadline, progress);
  }
  Status node_nccl_allgather(const void* send, void* recv, size_t bytes, Deadline deadline,
                             const Progress& progress) override {
    return node_nccl_->allgather(send, recv, bytes, stream_, deadline, progress);
  }
  Status node_nccl_wait(Deadline deadline, const Progress& progress) override {
    return node_nccl_->wait(stream_, deadline, progress);
  }
  // Any thread (gw_comm_abort): the progress thread's NCCL wait stops and aborts NCCL.
  void abort() override {
    std::lock_guard<std::mutex> lock(nccl_mu_);
    if (nccl_ != nullptr) nccl_->request_abort();
    if (node_nccl_ != nullptr) node_nccl_->request_abort();
  }
#endif

 private:
  struct Block {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  struct Encoder {
    std::unique_ptr<Codec> codec;  // a copy: the caller's codec may be freed between calls
    std::unique_ptr<kern::DeviceEncoder> encoder;
  };

  explicit CudaBackend(int device) : device_(device) {}

  // Free events for marks; shared with the marks, which may outlive the backend.
  struct EventPool {
    std::mutex mu;
    std::vector<cudaEvent_t> free;
    cudaEvent_t take() {
      std::lock_guard<std::mutex> lock(mu);
      if (free.empty()) return nullptr;
      cudaEvent_t e = free.back();
      free.pop_back();
      return e;
    }
    void give(cudaEvent_t e) {
      std::lock_guard<std::mutex> lock(mu);
      free.push_back(e);
    }
    ~EventPool() {
      for (cudaEvent_t e : free) cudaEventDestroy(e);
    }
  };

  struct CudaMark final : StreamMark {
    const CudaBackend* owner;
    std::shared_ptr<EventPool> pool;
    cudaEvent_t event;
    CudaMark(const CudaBackend* o, std::shared_ptr<EventPool> p, cudaEvent_t e)
        : owner(o), pool(std::move(p)), event(e) {}
    // Back to the pool: a wait enqueued on it (begin) keeps the state it saw, so the event
    // may be recorded again at once.
    ~CudaMark() override { pool->give(event); }
  };

  // cuStreamWaitValue32 (CUDA 11.7's signature) from the driver, without linking libcuda; null
  // where the driver has none. Its types spelled as the driver's ABI has them.
  using WaitValue32 = int (*)(cudaStream_t stream, unsigned long long addr, uint32_t value, unsigned flags);
  static constexpr unsigned kWaitValueGeq = 0;  // CU_STREAM_WAIT_VALUE_GEQ: cyclic >=
  static WaitValue32 driver_wait_value32() {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 11070, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return reinterpret_cast<WaitValue32>(fn);
  }

  static Block& block(std::vector<Block>& v, int slot) {
    if (v.size() <= static_cast<size_t>(slot)) v.resize(static_cast<size_t>(slot) + 1);
    return v[static_cast<size_t>(slot)];
  }

  Result<kern::DeviceEncoder*> encoder(const Codec& codec) {
    const std::string key = codec.spec().to_string();
    auto it = encoders_.find(key);
    if (it == encoders_.end()) {
      Encoder e;
      GW_ASSIGN_OR_RETURN(e.codec, Codec::create(key));
      e.encoder = std::make_unique<kern::DeviceEncoder>(*e.codec);
      it = encoders_.emplace(key, std::move(e)).first;
    }
    return it->second.encoder.get();
  }

  int device_;
  bool pools_ = true;  // stream-ordered allocation on device_ (kern::memory_pools_supported)
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<EventPool> marks_ = std::make_shared<EventPool>();
  uint32_t* word_ = nullptr;            // the completion word (pinned, mapped)
  uint32_t* word_on_device_ = nullptr;  // its device address
  std::atomic<WaitValue32> wait_value_{nullptr};
  std::mutex wait_mu_;
  bool any_wait_ = false;
  uint32_t max_waited_ = 0;  // under wait_mu_
  std::vector<Block> scratch_;
  std::vector<Block> staging_;
  std::map<std::string, Encoder> encoders_;
  std::deque<std::pair<Fence, cudaEvent_t>> pending_;
  std::vector<cudaEvent_t> free_events_;
  Fence issued_ = 0;
  Fence completed_ = 0;
#ifdef GW_HAVE_NCCL
  std::mutex nccl_mu_;  // nccl_ and node_nccl_ are replaced by the progress thread and read by abort()
  std::unique_ptr<nccl::Comm> nccl_;
  std::unique_ptr<nccl::Comm> node_nccl_;  // the ranks of this node (hierarchical all-reduce)
#endif
};

}  // namespace

Result<std::unique_ptr<DeviceBackend>> make_cuda_backend() { return CudaBackend::create(); }

}  // namespace gw::coll
