// The accelerators the backend's device path runs on, behind one small interface: CUDA (torch's
// streams and events; built when the extension is compiled with GW_TORCH_CUDA) and gradwire's
// stand-in (gradwire/standin.h: host memory and worker-thread streams), on which the tests
// check the stream order of every op without a GPU.
//
// A device op follows ProcessGroupNCCL's order: it takes the caller's current stream S when it
// is called; what it must do to its inputs first (packing) is enqueued on S; the gradwire call
// is made with S (gradwire orders its work after that point, with no host wait); then the
// group's own stream B waits for the request (gw_request_stream_wait, no host wait), runs what
// must be done to the outputs (unpacking) and records the op's end event E. Work::wait() makes
// the caller's current stream wait for E.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#ifdef GW_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace gwtorch {

// A stream: gradwire's void* handle (a cudaStream_t, or a stand-in stream) and its device.
struct DevStream {
  void* handle = nullptr;
  int device = -1;
};

// A point on one stream of an accelerator.
class StreamEvent {
 public:
  virtual ~StreamEvent() = default;
};

class Accelerator {
 public:
  virtual ~Accelerator() = default;
  virtual const char* name() const = 0;
  // The caller's current stream for t's device, as gradwire's void* stream.
  virtual DevStream current_stream(const at::Tensor& t) = 0;
  // The group's own stream on t's device (where outputs are unpacked).
  virtual DevStream group_stream(const at::Tensor& t) = 0;
  // Whether the caller chose stream semantics: false for the stand-in when the calling thread
  // set no stream (its torch ops then run on the host at once, so waits must block).
  virtual bool stream_ordered() const { return true; }
  // Device memory for n elements of opts' dtype on opts' device (contiguous).
  virtual at::Tensor empty(int64_t n, const at::TensorOptions& opts) = 0;
  // Host memory the device copies to and from asynchronously (pinned for CUDA).
  virtual at::Tensor empty_host(int64_t bytes) = 0;
  // fn's work runs in stream's order: CUDA enqueues its torch ops on stream now; the stand-in
  // runs fn later on the stream's thread.
  virtual void run_on(DevStream stream, std::function<void()> fn) = 0;
  virtual std::shared_ptr<StreamEvent> record(DevStream stream) = 0;
  virtual void stream_wait(DevStream stream, const StreamEvent& e) = 0;
  virtual void host_wait(const StreamEvent& e) = 0;
  // A Future for outputs on device, completed now "on" stream (waiters' streams wait for what
  // stream has queued so far); null where futures cannot be stream-completed (stand-in).
  virtual c10::intrusive_ptr<c10::ivalue::Future> completed_future(const std::vector<at::Tensor>& outputs,
                                                                   DevStream stream) {
    (void)outputs;
    (void)stream;
    return {};
  }
};

// ---------------------------------------------------------------- the stand-in

// The part of gradwire/standin.h the backend uses, opened with the rest of the library.
struct StandInApi {
  int (*stream_enqueue)(void* stream, void (*fn)(void*), void* arg) = nullptr;
  int (*event_record)(void* stream, uint64_t* event) = nullptr;
  int (*stream_wait_event)(void* waiter, void* stream, uint64_t event) = nullptr;
  int (*event_synchronize)(void* stream, uint64_t event) = nullptr;
  int (*stream_create)(int max_delay_us, uint64_t seed, void** stream) = nullptr;
  int (*malloc_)(size_t bytes, void** ptr) = nullptr;
  int (*free_)(void* ptr) = nullptr;
  int (*current)(void** stream) = nullptr;
  int (*contains)(const void* ptr, size_t bytes, int* yes) = nullptr;
};

class StandInAccelerator final : public Accelerator {
 public:
  // The calling thread's current stand-in stream (set from Python: gradwire.standin.stream()).
  // Null: none chosen; the default stream, with the host's order for torch's own ops.
  void* standin_current() const {
    void* s = nullptr;
    api_.current(&s);
    return s;
  }
  bool holds(const at::Tensor& t) const {
    int yes = 0;
    const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
    return t.device().is_cpu() && t.numel() > 0 && api_.contains(t.data_ptr(), bytes, &yes) == 0 && yes == 1;
  }
  explicit StandInAccelerator(const StandInApi& api) : api_(api) {
    TORCH_CHECK(api_.stream_create(50, 0x9e3779b9ULL, &group_) == 0, "gradwire backend: cannot make a stand-in stream");
  }
  const char* name() const override { return "stand-in"; }
  DevStream current_stream(const at::Tensor&) override { return DevStream{standin_current(), -1}; }
  DevStream group_stream(const at::Tensor&) override { return DevStream{group_, -1}; }
  bool stream_ordered() const override { return standin_current() != nullptr; }
  at::Tensor empty(int64_t n, const at::TensorOptions& opts) override {
    const size_t bytes = static_cast<size_t>(n) * opts.dtype().itemsize();
    void* p = nullptr;
    TORCH_CHECK(api_.malloc_(bytes, &p) == 0, "gradwire backend: stand-in allocation of ", bytes, " bytes failed");
    auto free_fn = api_.free_;
    return at::from_blob(
        p, {n}, [free_fn](void* q) { free_fn(q); }, opts.device(at::kCPU));
  }
  at::Tensor empty_host(int64_t bytes) override { return at::empty({bytes}, at::TensorOptions().dtype(at::kByte)); }
  void run_on(DevStream stream, std::function<void()> fn) override {
    auto* heap = new std::function<void()>(std::move(fn));
    const int r = api_.stream_enqueue(stream.handle, &trampoline, heap);
    if (r != 0) {
      delete heap;
      TORCH_CHECK(false, "gradwire backend: stand-in enqueue failed");
    }
  }
  std::shared_ptr<StreamEvent> record(DevStream stream) override {
    auto e = std::make_shared<Event>();
    e->stream = stream.handle;
    api_.event_record(stream.handle, &e->position);
    return e;
  }
  void stream_wait(DevStream stream, const StreamEvent& ev) override {
    const auto& e = static_cast<const Event&>(ev);
    api_.stream_wait_event(stream.handle, e.stream, e.position);
  }
  void host_wait(const StreamEvent& ev) override {
    const auto& e = static_cast<const Event&>(ev);
    api_.event_synchronize(e.stream, e.position);
  }

 private:
  struct Event final : StreamEvent {
    void* stream = nullptr;
    uint64_t position = 0;
  };
  static void trampoline(void* arg) {
    std::unique_ptr<std::function<void()>> fn(static_cast<std::function<void()>*>(arg));
    (*fn)();
  }
  StandInApi api_;
  void* group_ = nullptr;  // never destroyed: work may still be queued at exit
};

// ---------------------------------------------------------------- CUDA

#ifdef GW_TORCH_CUDA
class CudaAccelerator final : public Accelerator {
 public:
  const char* name() const override { return "cuda"; }
  DevStream current_stream(const at::Tensor& t) override {
    return DevStream{at::cuda::getCurrentCUDAStream(t.device().index()).stream(), t.device().index()};
  }
  DevStream group_stream(const at::Tensor& t) override {
    return DevStream{group_of(t.device().index()).stream(), t.device().index()};
  }
  at::Tensor empty(int64_t n, const at::TensorOptions& opts) override {
    // On the caller's current stream (the caching allocator's stream), where the op's packing
    // runs; it is kept until the op's end event was reached (Pending), so no recordStream.
    return at::empty({n}, opts);
  }
  at::Tensor empty_host(int64_t bytes) override {
    return at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  }
  void run_on(DevStream stream, std::function<void()> fn) override {
    c10::cuda::CUDAStreamGuard guard(wrap(stream));
    fn();
  }
  std::shared_ptr<StreamEvent> record(DevStream stream) override {
    auto e = std::make_shared<Event>();
    e->event.record(wrap(stream));
    return e;
  }
  void stream_wait(DevStream stream, const StreamEvent& ev) override {
    static_cast<const Event&>(ev).event.block(wrap(stream));
  }
  void host_wait(const StreamEvent& ev) override { static_cast<const Event&>(ev).event.synchronize(); }
  c10::intrusive_ptr<c10::ivalue::Future> completed_future(const std::vector<at::Tensor>& outputs,
                                                           DevStream stream) override {
    std::vector<c10::Device> devices;
    for (const auto& t : outputs) {
      if (t.is_cuda() && std::find(devices.begin(), devices.end(), t.device()) == devices.end()) {
        devices.push_back(t.device());
      }
    }
    auto fut = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()), devices);
    c10::cuda::CUDAStreamGuard guard(wrap(stream));  // markCompleted records its events here
    fut->markCompleted(c10::IValue(outputs));
    return fut;
  }

 private:
  struct Event final : StreamEvent {
    mutable at::cuda::CUDAEvent event{cudaEventDisableTiming};
  };
  static c10::cuda::CUDAStream wrap(DevStream s) {
    return c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(s.handle),
                                            static_cast<c10::DeviceIndex>(s.device));
  }
  c10::cuda::CUDAStream group_of(c10::DeviceIndex device) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& g : groups_) {
      if (g.device_index() == device) return g;
    }
    groups_.push_back(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device));
    return groups_.back();
  }
  std::mutex mu_;
  std::vector<c10::cuda::CUDAStream> groups_;
};
#endif

}  // namespace gwtorch
