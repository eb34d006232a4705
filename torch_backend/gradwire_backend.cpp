// torch.distributed backend "gradwire": every c10d collective runs on one gradwire
// communicator through the C ABI (include/gradwire/gradwire.h).
//
// One translation unit on purpose: the torch headers make each one slow to compile.
//
// libgradwire is opened at run time (dlopen of the path python/gradwire/_lib.py loaded), so
// the extension and the ctypes package use the same library and the same communicators.
//
// Every op is non-blocking: it stages its tensors (a contiguous host copy where the user's
// tensor is not contiguous host memory), posts the gw_i* call and returns a Work. The
// request's completion callback (gradwire's progress thread) only queues it; a completion
// thread owned by the backend frees the request (gw_wait, which returns at once), copies
// staged outputs back, finishes the Work and completes its Future. Future callbacks may run
// Python, so they never run on gradwire's thread.
//
// Builds against PyTorch 2.x (base class c10d::Backend) and 1.13 (c10d::ProcessGroup).
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

#ifdef GW_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "device_streams.hpp"
#include "gradwire/gradwire.h"
#include "gradwire/standin.h"

namespace gwtorch {

#if TORCH_VERSION_MAJOR >= 2
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif

using Tensors = std::vector<at::Tensor>;
using Ms = std::chrono::milliseconds;

// ---------------------------------------------------------------- the C ABI, opened at run time

// clang-format off
#define GWT_FUNCTIONS(X) \
  X(gw_get_error_string) \
  X(gw_get_last_error) \
  X(gw_comm_init_with_allgather) \
  X(gw_comm_destroy) \
  X(gw_comm_abort) \
  X(gw_comm_rank) \
  X(gw_comm_size) \
  X(gw_wait) \
  X(gw_request_on_complete) \
  X(gw_iallreduce) \
  X(gw_ireduce) \
  X(gw_ibroadcast) \
  X(gw_iallgather) \
  X(gw_iallgatherv) \
  X(gw_ireduce_scatter) \
  X(gw_ialltoall) \
  X(gw_ialltoallv) \
  X(gw_igather) \
  X(gw_iscatter) \
  X(gw_ibarrier) \
  X(gw_isend) \
  X(gw_irecv) \
  X(gw_iallreduce_device) \
  X(gw_iallgather_device) \
  X(gw_ibroadcast_device) \
  X(gw_request_stream_wait) \
  X(gw_comm_enable_nccl) \
  X(gw_comm_trim) \
  X(gw_set_device_allocator) \
  X(gw_comm_use_standin) \
  X(gw_standin_stream_enqueue) \
  X(gw_standin_event_record) \
  X(gw_standin_stream_wait_event) \
  X(gw_standin_event_synchronize) \
  X(gw_standin_stream_create) \
  X(gw_standin_malloc) \
  X(gw_standin_free) \
  X(gw_standin_current_stream) \
  X(gw_standin_contains)
// clang-format on

struct Api {
  void* handle = nullptr;
  std::string path;
#define GWT_DECLARE(name) decltype(&::name) name = nullptr;
  GWT_FUNCTIONS(GWT_DECLARE)
#undef GWT_DECLARE
};

Api& api() {
  static Api a;
  return a;
}
std::mutex g_api_mutex;

void load_library(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_api_mutex);
  Api& a = api();
  if (a.handle != nullptr) {
    TORCH_CHECK(a.path == path, "gradwire backend: libgradwire is already loaded from ", a.path, "; cannot switch to ",
                path);
    return;
  }
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  TORCH_CHECK(h != nullptr, "gradwire backend: cannot open ", path, ": ", dlerror());
  Api loaded;
  loaded.handle = h;
  loaded.path = path;
#define GWT_LOAD(name) loaded.name = reinterpret_cast<decltype(&::name)>(dlsym(h, #name));
  GWT_FUNCTIONS(GWT_LOAD)
#undef GWT_LOAD
  // Without these nothing works; the others fail only the ops that need them.
  std::string missing;
  if (!loaded.gw_get_error_string) missing += " gw_get_error_string";
  if (!loaded.gw_get_last_error) missing += " gw_get_last_error";
  if (!loaded.gw_comm_destroy) missing += " gw_comm_destroy";
  if (!loaded.gw_wait) missing += " gw_wait";
  if (!missing.empty()) {
    dlclose(h);
    TORCH_CHECK(false, "gradwire backend: ", path, " lacks", missing, " (too old a libgradwire)");
  }
  a = loaded;
}

// The function, or a clear error when the loaded library predates it.
template <typename F>
F need(F f, const char* name) {
  TORCH_CHECK_NOT_IMPLEMENTED(f != nullptr, "gradwire backend: the loaded libgradwire (", api().path, ") has no ", name,
                              "; rebuild libgradwire");
  return f;
}
#define GWT_NEED(name) need(api().name, #name)

std::string describe(gw_result_t r, const std::string& message) {
  const char* name = api().gw_get_error_string(r);
  return std::string(name ? name : "error") + ": " + message;
}

std::string last_error() {
  const char* m = api().gw_get_last_error();
  return m ? m : "";
}

// ---------------------------------------------------------------- Work

// For the stream-order tests only (tests/python/test_torch_streams.py): GRADWIRE_TEST_DROP_WAIT
// names one wait of the device path to leave out ("work": Work::wait's, "group": the group
// stream's wait for the request), so a test can show it fails without it.
inline bool drop_wait(const char* which) {
  static const std::string v = [] {
    const char* e = std::getenv("GRADWIRE_TEST_DROP_WAIT");
    return std::string(e != nullptr ? e : "");
  }();
  return v == which;
}

class GradwireWork : public c10d::Work {
 public:
  GradwireWork(int rank, c10d::OpType type, const char* title, const char* name, const Tensors& inputs, Tensors outputs,
               Ms timeout)
      : c10d::Work(rank, type, title, c10::optional<Tensors>(inputs)),
        name_(name),
        outputs_(std::move(outputs)),
        timeout_(timeout),
        future_(c10::make_intrusive<at::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  // timeout 0 (the default): the op's timeout (the group's unless the op set one), plus a
  // margin so that gradwire's own timeout, which names the ranks that never called, comes
  // first.
  // A device op (device_streams.hpp): its end event on the group's stream, the tensor whose
  // device names the caller's stream, whether wait() blocks the host, and the Future completed
  // on the group's stream at the call (null: the host-completed one).
  void set_device(Accelerator* acc, std::shared_ptr<StreamEvent> end, at::Tensor anchor, bool blocking,
                  c10::intrusive_ptr<c10::ivalue::Future> on_stream) {
    acc_ = acc;
    end_ = std::move(end);
    anchor_ = std::move(anchor);
    blocking_ = blocking;
    on_stream_ = std::move(on_stream);
  }

  bool wait(Ms timeout) override {
    if (acc_ != nullptr && !blocking_ && acc_->stream_ordered()) {
      // As ProcessGroupNCCL: the caller's current stream waits for the op's end; the host does
      // not. An error that is already known is raised here; a later one by the group's next op.
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (exception_) std::rethrow_exception(exception_);
      }
      if (!drop_wait("work")) acc_->stream_wait(acc_->current_stream(anchor_), *end_);
      return true;
    }
    const bool own = timeout <= Ms(0);
    Ms limit = own ? timeout_ + std::max(Ms(5000), timeout_ / 10) : timeout;
    limit = std::min(limit, Ms(int64_t(1) << 40));
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_for(lock, limit, [&] { return completed_; })) {
      TORCH_CHECK(false, "gradwire ", name_, ": not finished after ", limit.count(), " ms (",
                  own ? "the group's timeout" : "the timeout given to wait", "); it is still pending");
    }
    if (exception_) std::rethrow_exception(exception_);
    lock.unlock();
    // And the Future, marked completed right after (complete()): a caller that attaches
    // then() once wait() returned must find it completed, so that its callback runs at once,
    // on its own thread (torchft's managed works rely on that; a callback run later on the
    // completion thread races their chaining). Inside a callback of this Future it is already
    // marked completed, so this does not wait.
    future_->wait();
    return true;
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return on_stream_ ? on_stream_ : future_; }
  Tensors result() override { return outputs_; }
  const char* name() const { return name_; }

  // On the completion thread: the Work first (wait() returns), then the Future (its
  // callbacks may run Python and call wait on this or other works).
  void complete(std::exception_ptr error) {
    finish(error);
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
  }

 private:
  const char* name_;
  Tensors outputs_;
  Ms timeout_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  Accelerator* acc_ = nullptr;
  std::shared_ptr<StreamEvent> end_;
  at::Tensor anchor_;
  bool blocking_ = false;
  c10::intrusive_ptr<c10::ivalue::Future> on_stream_;
};

// ---------------------------------------------------------------- completion thread

struct Pending {
  gw_request_t request = nullptr;
  c10::intrusive_ptr<GradwireWork> work;
  std::function<void()> finalize;  // after success: copy staged outputs back
  Tensors keep;                    // staging buffers gradwire reads or writes
  std::vector<size_t> sizes;       // size arrays given to the call
  std::string message;             // the completion callback's error text
  // A device op's: waits for its end event, so nothing queued on a stream still uses the
  // tensors kept here when they are let go.
  std::function<void()> before_release;
  // A device op's: called with the error when the op failed (the group's async error).
  std::function<void(const std::string&)> on_error;
  class Completer* owner = nullptr;
};

class Completer {
 public:
  Completer() : thread_([this] { loop(); }) {}

  ~Completer() {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      stop_ = true;
      cv_.notify_all();
    }
    thread_.join();
  }

  void add(std::unique_ptr<Pending> p) {
    p->owner = this;
    Pending* raw = p.release();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++outstanding_;
    }
    // The callback may run at once, in this thread: no lock held here.
    if (api().gw_request_on_complete != nullptr &&
        api().gw_request_on_complete(raw->request, &Completer::on_complete, raw) == GW_SUCCESS) {
      return;
    }
    // No callback (an older library): collectives finish in call order, so the thread can
    // wait for them one after another.
    std::lock_guard<std::mutex> lock(mutex_);
    ready_.push_back(raw);
    cv_.notify_all();
  }

  // Blocks until every request handed over has been completed and the thread has dropped its
  // references to it (to the Work and the tensors it keeps).
  void drain() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return outstanding_ == 0; });
  }
  bool drain_for(Ms limit) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, limit, [&] { return outstanding_ == 0; });
  }

 private:
  static void on_complete(void* user, gw_result_t, const char* message) {
    auto* p = static_cast<Pending*>(user);
    Completer* c = p->owner;
    std::lock_guard<std::mutex> lock(c->mutex_);
    if (message != nullptr) p->message = message;
    c->ready_.push_back(p);
    c->cv_.notify_all();
  }

  void loop() {
    for (;;) {
      Pending* p = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return !ready_.empty() || (stop_ && outstanding_ == 0); });
        if (ready_.empty()) return;
        p = ready_.front();
        ready_.pop_front();
      }
      std::unique_ptr<Pending> owned(p);
      const gw_result_t r = api().gw_wait(owned->request);  // finished: frees it at once
      std::exception_ptr error;
      if (r != GW_SUCCESS) {
        std::string message = owned->message.empty() ? last_error() : owned->message;
        error = std::make_exception_ptr(
            std::runtime_error(std::string("gradwire ") + owned->work->name() + " failed: " + describe(r, message)));
      } else if (owned->finalize) {
        try {
          owned->finalize();
        } catch (...) {
          error = std::current_exception();
        }
      }
      if (owned->before_release) {
        try {
          owned->before_release();
        } catch (...) {
          if (!error) error = std::current_exception();
        }
      }
      if (error && owned->on_error) {
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          owned->on_error(e.what());
        }
      }
      auto work = std::move(owned->work);
      owned.reset();  // staging buffers go before the user sees the result
      work->complete(error);
      work.reset();
      std::lock_guard<std::mutex> lock(mutex_);
      --outstanding_;
      cv_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Pending*> ready_;
  size_t outstanding_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

// ---------------------------------------------------------------- tensors

// Memory gradwire may use for t: t itself when it is contiguous host memory, else a
// contiguous host copy (CUDA tensors are staged through the host), written back by finish().
class Staging {
 public:
  // Every tensor handed out is kept (a reference) until the request has finished: a caller
  // may drop its own (dist.isend(torch.ones(3), 1)).
  at::Tensor in(const at::Tensor& t) {
    if (t.device().is_cpu() && t.is_contiguous()) return keep(t);
    return keep(t.to(at::kCPU).contiguous());
  }
  // An output; with contents, its current values are copied in too (in-place ops).
  at::Tensor out(const at::Tensor& t, bool contents) {
    if (t.device().is_cpu() && t.is_contiguous()) return keep(t);
    at::Tensor buf =
        contents ? t.to(at::kCPU).contiguous()
                 : at::empty(t.sizes(), t.options().device(at::kCPU).memory_format(at::MemoryFormat::Contiguous));
    if (contents && buf.data_ptr() == t.data_ptr()) buf = buf.clone();
    back_.emplace_back(t, buf);
    return keep(buf);
  }
  at::Tensor scratch(int64_t n, at::ScalarType type) { return keep(at::empty({n}, at::TensorOptions().dtype(type))); }
  at::Tensor hold(at::Tensor t) { return keep(std::move(t)); }
  const Tensors& kept() const { return kept_; }
  std::vector<std::pair<at::Tensor, at::Tensor>> copies() const { return back_; }

 private:
  at::Tensor keep(at::Tensor t) {
    kept_.push_back(t);
    return t;
  }
  Tensors kept_;
  std::vector<std::pair<at::Tensor, at::Tensor>> back_;
};

size_t nbytes(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

// gradwire refuses null buffers; an empty tensor may have none.
void* ptr(const at::Tensor& t) {
  static uint64_t empty_buffer[1];
  void* p = t.data_ptr();
  return p != nullptr ? p : static_cast<void*>(empty_buffer);
}
char* bytes_of(const at::Tensor& t) { return static_cast<char*>(ptr(t)); }

gw_dtype_t gw_dtype(at::ScalarType s, const char* op) {
  switch (s) {
    case at::kFloat: return GW_FLOAT32;
    case at::kHalf: return GW_FLOAT16;
    case at::kBFloat16: return GW_BFLOAT16;
    case at::kDouble: return GW_FLOAT64;
    case at::kChar: return GW_INT8;
    case at::kByte: return GW_UINT8;
    case at::kBool: return GW_UINT8;
    case at::kInt: return GW_INT32;
    case at::kLong: return GW_INT64;
    default: break;
  }
  TORCH_CHECK_NOT_IMPLEMENTED(false, "gradwire backend: ", op, " does not reduce dtype ", c10::toString(s),
                              " (float32, float16, bfloat16, float64, int8, uint8, int32, int64, bool)");
}

const char* op_name(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "an unknown op";
  }
}

gw_red_op_t gw_op(const c10d::ReduceOp& reduce, at::ScalarType s, const char* op) {
  const auto o = reduce.op_;
  if (s == at::kBool) {  // as NCCL: sum and max are "or", product and min are "and"
    if (o == c10d::ReduceOp::SUM || o == c10d::ReduceOp::MAX) return GW_MAX;
    if (o == c10d::ReduceOp::PRODUCT || o == c10d::ReduceOp::MIN) return GW_MIN;
  }
  switch (o) {
    case c10d::ReduceOp::SUM: return GW_SUM;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK_NOT_IMPLEMENTED(s != at::kBool, "gradwire backend: ", op,
                                  " with AVG on bool tensors is not supported");
      return GW_AVG;
    case c10d::ReduceOp::PRODUCT: return GW_PROD;
    case c10d::ReduceOp::MIN: return GW_MIN;
    case c10d::ReduceOp::MAX: return GW_MAX;
    default: break;
  }
  TORCH_CHECK_NOT_IMPLEMENTED(false, "gradwire backend: ", op, " with ReduceOp.", op_name(o),
                              " is not supported (SUM, AVG, PRODUCT, MIN and MAX are)");
}

// The op of a reduction that also takes PREMUL_SUM (NCCL's op, FSDP2's
// set_gradient_divide_factor: the sum of factor * input): all_reduce, reduce_scatter and
// reduce_scatter_tensor scale the input on the caller's stream (apply) and sum.
struct PreMul {
  gw_red_op_t op = GW_SUM;
  bool on = false;
  double factor = 1.0;
  at::Tensor tensor;  // the factor as a one-element tensor, where the op carries one
  at::Tensor apply(const at::Tensor& x) const { return tensor.defined() ? x * tensor.to(x.device()) : x * factor; }
};

PreMul premul_of(const c10d::ReduceOp& reduce, at::ScalarType s, const char* op) {
  PreMul p;
  if (reduce.op_ != c10d::ReduceOp::PREMUL_SUM) {
    p.op = gw_op(reduce, s, op);
    return p;
  }
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(s), "gradwire backend: ", op,
                              " with ReduceOp.PREMUL_SUM takes floating-point tensors, not ", c10::toString(s));
  const auto* sup = dynamic_cast<const c10d::NCCLPreMulSumSupplement*>(reduce.supplement_.get());
  TORCH_CHECK(sup != nullptr, "gradwire backend: ", op, ": ReduceOp.PREMUL_SUM without its factor");
#if TORCH_VERSION_MAJOR >= 2
  if (sup->tensor_factor.defined()) p.tensor = sup->tensor_factor;
#else
  if (!sup->tensor_factors.empty()) p.tensor = sup->tensor_factors[0];
#endif
  p.factor = sup->double_factor;
  p.on = true;
  return p;
}

const at::Tensor& single(const Tensors& ts, const char* op) {
  TORCH_CHECK_NOT_IMPLEMENTED(ts.size() == 1, "gradwire backend: ", op, " takes one tensor per process, got ",
                              ts.size());
  return ts[0];
}

void same_type(const at::Tensor& a, const at::Tensor& b, const char* op) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "gradwire backend: ", op, ": tensors of dtype ",
              c10::toString(a.scalar_type()), " and ", c10::toString(b.scalar_type()), " mixed");
}

// Copies tensors' bytes into one packed host buffer (in order); returns each one's offset.
at::Tensor pack(Staging& s, const Tensors& ts, std::vector<size_t>* offsets) {
  size_t total = 0;
  for (const auto& t : ts) total += nbytes(t);
  at::Tensor packed = s.scratch(static_cast<int64_t>(total), at::kByte);
  size_t off = 0;
  for (const auto& t : ts) {
    at::Tensor h = t.to(at::kCPU).contiguous();
    if (offsets) offsets->push_back(off);
    if (nbytes(h)) std::memcpy(bytes_of(packed) + off, h.data_ptr(), nbytes(h));
    off += nbytes(h);
  }
  return packed;
}

// Copies n bytes at src into the user's tensor t (any layout or device).
void unpack_into(const at::Tensor& t, const char* src) {
  if (t.numel() == 0) return;
  if (t.device().is_cpu() && t.is_contiguous()) {
    std::memcpy(t.data_ptr(), src, nbytes(t));
    return;
  }
  at::Tensor h = at::empty(t.sizes(), t.options().device(at::kCPU).memory_format(at::MemoryFormat::Contiguous));
  std::memcpy(h.data_ptr(), src, nbytes(t));
  t.copy_(h);
}

// ---------------------------------------------------------------- bootstrap over the Store

struct StoreGather {
  c10::intrusive_ptr<c10d::Store> store;
  std::string prefix;
  int rank = 0;
  int size = 0;
  int round = 0;
  std::string error;
};

gw_result_t store_allgather(void* user, const void* sendbuf, void* recvbuf, size_t bytes) {
  auto* g = static_cast<StoreGather*>(user);
  try {
    const std::string base = "gradwire/" + g->prefix + "/" + std::to_string(g->round++) + "/";
    const auto* in = static_cast<const uint8_t*>(sendbuf);
    g->store->set(base + std::to_string(g->rank), std::vector<uint8_t>(in, in + bytes));
    for (int r = 0; r < g->size; ++r) {
      const std::vector<uint8_t> v = g->store->get(base + std::to_string(r));  // waits, store timeout
      if (v.size() != bytes) {
        g->error = "rank " + std::to_string(r) + " published " + std::to_string(v.size()) + " bytes under " + base +
                   ", expected " + std::to_string(bytes);
        return GW_ERR_INVALID_USAGE;
      }
      if (bytes) std::memcpy(static_cast<uint8_t*>(recvbuf) + r * bytes, v.data(), bytes);
    }
    return GW_SUCCESS;
  } catch (const std::exception& e) {
    g->error = std::string("store: ") + e.what();
    return GW_ERR_SYSTEM;
  }
}

// ---------------------------------------------------------------- the backend

class GradwireBackend;

// Every backend alive in this process. At interpreter exit (an atexit handler of
// gradwire._backend) they are shut down while Python still runs: a completion thread that
// dropped the last reference to a Python-owned tensor during finalisation would need the GIL,
// and a thread asking for the GIL then is ended inside a destructor (std::terminate).
class LiveBackends {
 public:
  void add(GradwireBackend* b) {
    std::lock_guard<std::mutex> lock(mutex_);
    backends_.push_back(b);
  }
  void remove(GradwireBackend* b) {
    std::lock_guard<std::mutex> lock(mutex_);
    backends_.erase(std::remove(backends_.begin(), backends_.end(), b), backends_.end());
  }
  void shutdown_all(Ms grace);

 private:
  std::mutex mutex_;
  std::vector<GradwireBackend*> backends_;
};

LiveBackends& live_backends() {
  static auto* live = new LiveBackends();  // never destroyed: backends may outlive statics
  return *live;
}

class GradwireBackend : public BackendBase {
 public:
  GradwireBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, double timeout_s,
                  const std::string& prefix, std::map<std::string, std::string> options)
      : BackendBase(rank, size), timeout_(Ms(static_cast<int64_t>(timeout_s * 1000.0))), options_(std::move(options)) {
    TORCH_CHECK(api().handle != nullptr, "gradwire backend: libgradwire not loaded (load_library first)");
    StoreGather g;
    g.store = store;
    g.prefix = prefix;
    g.rank = rank;
    g.size = size;
    gw_config_t cfg = GW_CONFIG_INITIALIZER;
    cfg.timeout_s = timeout_s;
    const gw_result_t r = GWT_NEED(gw_comm_init_with_allgather)(&comm_, size, rank, &store_allgather, &g, &cfg);
    if (r != GW_SUCCESS) {
      std::string message = last_error();
      if (!g.error.empty()) message += " (" + g.error + ")";
      TORCH_CHECK(false, "gradwire backend: init of rank ", rank, " of ", size, " failed: ", describe(r, message));
    }
    blocking_wait_ = env_flag("GRADWIRE_TORCH_BLOCKING_WAIT");
    try {
      set_up_devices(g);
    } catch (...) {
      api().gw_comm_destroy(comm_);
      comm_ = nullptr;
      throw;
    }
    live_backends().add(this);
  }

  ~GradwireBackend() override {
    live_backends().remove(this);
    shutdown_without_gil();
  }

  // Future callbacks on the completion thread may need the GIL this thread holds.
  void shutdown_without_gil() {
    if (Py_IsInitialized() && PyGILState_Check()) {
      pybind11::gil_scoped_release release;
      shutdown_comm();
    } else {
      shutdown_comm();
    }
  }

  const std::string getBackendName() const override { return "gradwire"; }

  // Collectives issued on this group so far (point-to-point excluded): equal on every rank
  // while the ranks make the same calls, which is what torch's ProcessGroupWrapper
  // (TORCH_DISTRIBUTED_DEBUG=DETAIL) checks.
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return seq_.load(); }

#if TORCH_VERSION_MAJOR >= 2
  // Fails every pending and later op (torch's abort of a group, e.g. on a peer's failure).
  void abort() override {
    std::lock_guard<std::mutex> lock(submit_mutex_);
    if (comm_ != nullptr) GWT_NEED(gw_comm_abort)(comm_);
  }

  // destroy_process_group's normal end of the group: what is pending finishes, then the
  // connections close (peers see no endpoint timeouts). Later calls fail with a clear error.
  void shutdown() override { shutdown_without_gil(); }

  c10::intrusive_ptr<Options> getBackendOptions() override {
    return c10::make_intrusive<Options>("gradwire", timeout_);
  }
#endif

  gw_comm_t comm() const { return comm_; }
  bool nccl() const { return nccl_; }
  std::string device_path() const {
    if (standin_) return "stand-in accelerator (gradwire/standin.h)";
    if (cuda_ == nullptr) return "none (CUDA tensors are staged through host memory: extension built without CUDA)";
    return nccl_ ? "cuda: dense ops on NCCL, compressed ones on the device codecs"
                 : "cuda: device collectives over gradwire's transport (no NCCL: " + no_nccl_why_ + ")";
  }
  // Gives back the device scratch and staging gradwire keeps between calls.
  void trim() {
    std::lock_guard<std::mutex> lock(submit_mutex_);
    TORCH_CHECK(comm_ != nullptr, "gradwire backend: the group was shut down");
    const gw_result_t r = GWT_NEED(gw_comm_trim)(comm_);
    TORCH_CHECK(r == GW_SUCCESS, "gradwire backend: trim failed: ", describe(r, last_error()));
  }
  const std::map<std::string, std::string>& options() const { return options_; }
  double timeout_s() const { return timeout_.count() / 1000.0; }

  // ---- reductions

  c10::intrusive_ptr<c10d::Work> allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) override {
    const char* name = "all_reduce";
    const at::Tensor& t = single(tensors, name);
    const gw_dtype_t dt = gw_dtype(t.scalar_type(), name);
    const PreMul pm = premul_of(opts.reduceOp, t.scalar_type(), name);
    const gw_red_op_t op = pm.op;
    if (pm.on) at::Tensor(t).copy_(pm.apply(t));  // in place, as the result will be
    if (Accelerator* acc = accel_for(tensors)) {
      DeviceBuffer b = device_buffer(*acc, t);
      DeviceOp d{c10d::OpType::ALLREDUCE,
                 "gradwire:all_reduce",
                 name,
                 tensors,
                 tensors,
                 t,
                 {b.flat},
                 nullptr,
                 allreduce_start(b.flat, dt, op),
                 nullptr,
                 opts.timeout};
      if (b.temp) {
        at::Tensor flat = b.flat, user = t;
        d.pack = [flat, user]() { flat.view(user.sizes()).copy_(user); };
        d.unpack = [flat, user]() { user.copy_(flat.view(user.sizes())); };
      }
      return launch_device(*acc, std::move(d));
    }
    Staging s;
    at::Tensor b = s.out(t, true);
    auto start = [=](gw_request_t* req) {
      return GWT_NEED(gw_iallreduce)(comm_, ptr(b), ptr(b), b.numel(), dt, op, nullptr, nullptr, GW_ALGO_AUTO, req);
    };
    return launch(c10d::OpType::ALLREDUCE, "gradwire:all_reduce", name, tensors, tensors, s, start, opts.timeout);
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(Tensors& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override {
    const char* name = "all_reduce_coalesced";
    TORCH_CHECK(!tensors.empty(), "gradwire backend: ", name, " got no tensors");
    for (const auto& t : tensors) same_type(t, tensors[0], name);
    const gw_dtype_t dt = gw_dtype(tensors[0].scalar_type(), name);
    const gw_red_op_t op = gw_op(opts.reduceOp, tensors[0].scalar_type(), name);
    if (Accelerator* acc = accel_for(tensors)) {
      std::function<void()> pack;
      at::Tensor bytes = pack_device(*acc, tensors, tensors[0].options(), &pack);
      at::Tensor buf = bytes.view(tensors[0].scalar_type());
      Tensors users = tensors;
      DeviceOp d{c10d::OpType::ALLREDUCE_COALESCED,
                 "gradwire:all_reduce_coalesced",
                 name,
                 tensors,
                 tensors,
                 tensors[0],
                 {bytes},
                 pack,
                 allreduce_start(buf, dt, op),
                 [bytes, users]() { unpack_bytes(bytes, 0, users); },
                 opts.timeout};
      return launch_device(*acc, std::move(d));
    }
    Staging s;
    Tensors flat;
    for (const auto& t : tensors) flat.push_back(t.to(at::kCPU).reshape({-1}));
    at::Tensor b = s.hold(at::cat(flat));
    Tensors users = tensors;
    auto start = [=](gw_request_t* req) {
      return GWT_NEED(gw_iallreduce)(comm_, ptr(b), ptr(b), b.numel(), dt, op, nullptr, nullptr, GW_ALGO_AUTO, req);
    };
    auto finalize = [b, users]() {
      int64_t off = 0;
      for (const auto& t : users) {
        t.copy_(b.narrow(0, off, t.numel()).view(t.sizes()));
        off += t.numel();
      }
    };
    return launch(c10d::OpType::ALLREDUCE_COALESCED, "gradwire:all_reduce_coalesced", name, tensors, tensors, s, start,
                  opts.timeout, finalize);
  }

  c10::intrusive_ptr<c10d::Work> reduce(Tensors& tensors, const c10d::ReduceOptions& opts) override {
    const char* name = "reduce";
    const at::Tensor& t = single(tensors, name);
    TORCH_CHECK(opts.rootTensor == 0, "gradwire backend: ", name, ": rootTensor must be 0");
    const gw_dtype_t dt = gw_dtype(t.scalar_type(), name);
    const gw_red_op_t op = gw_op(opts.reduceOp, t.scalar_type(), name);
    const int root = check_root(opts.rootRank, name);
    if (Accelerator* acc = accel_for(tensors)) {
      // An all-reduce into a temporary; the root keeps it (the other ranks' tensors stay).
      at::Tensor buf = acc->empty(t.numel(), t.options().memory_format(at::MemoryFormat::Contiguous));
      at::Tensor user = t;
      const bool mine = rank_ == root;
      DeviceOp d{c10d::OpType::REDUCE,
                 "gradwire:reduce",
                 name,
                 tensors,
                 tensors,
                 t,
                 {buf},
                 [buf, user]() { buf.view(user.sizes()).copy_(user); },
                 allreduce_start(buf, dt, op),
                 [buf, user, mine]() {
                   if (mine) user.copy_(buf.view(user.sizes()));
                 },
                 opts.timeout};
      return launch_device(*acc, std::move(d));
    }
    Staging s;
    at::Tensor b = s.out(t, true);
    auto start = [=](gw_request_t* req) {
      return GWT_NEED(gw_ireduce)(comm_, ptr(b), ptr(b), b.numel(), dt, op, root, req);
    };
    return launch(c10d::OpType::REDUCE, "gradwire:reduce", name, tensors, tensors, s, start, opts.timeout);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    const char* name = "reduce_scatter";
    const at::Tensor& out = single(outputs, name);
    const Tensors& listed = single_list(inputs, name);
    check_list(listed, out, name, "input");
    const gw_dtype_t dt = gw_dtype(out.scalar_type(), name);
    const PreMul pm = premul_of(opts.reduceOp, out.scalar_type(), name);
    const gw_red_op_t op = pm.op;
    Tensors scaled;
    if (pm.on) {
      for (const auto& t : listed) scaled.push_back(pm.apply(t));
    }
    const Tensors& in = pm.on ? scaled : listed;
    if (Accelerator* acc = accel_for(flatten(inputs))) {
      return device_reduce_scatter(*acc, c10d::OpType::REDUCE_SCATTER, "gradwire:reduce_scatter", name, in, out,
                                   flatten(inputs), outputs, dt, op, opts.timeout);
    }
    Staging s;
    at::Tensor send = pack(s, in, nullptr);
    at::Tensor recv = s.out(out, false);
    auto start = [=](gw_request_t* req) {
      return GWT_NEED(gw_ireduce_scatter)(comm_, ptr(send), ptr(recv), recv.numel(), dt, op, req);
    };
    return launch(c10d::OpType::REDUCE_SCATTER, "gradwire:reduce_scatter", name, flatten(inputs), outputs, s, start,
                  opts.timeout);
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& given,
                                                      const c10d::ReduceScatterOptions& opts) override {
    const char* name = "reduce_scatter_tensor";
    same_type(given, out, name);
    TORCH_CHECK(given.numel() == out.numel() * size_, "gradwire backend: ", name, ": the input has ", given.numel(),
                " elements, expected world size (", size_, ") x output (", out.numel(), ")");
    const gw_dtype_t dt = gw_dtype(out.scalar_type(), name);
    const PreMul pm = premul_of(opts.reduceOp, out.scalar_type(), name);
    const gw_red_op_t op = pm.op;
    at::Tensor in = pm.on ? pm.apply(given) : given;
    if (Accelerator* acc = accel_for(Tensors{in, out})) {
      return device_reduce_scatter(*acc, c10d::OpType::_REDUCE_SCATTER_BASE, "gradwire:reduce_scatter_tensor", name,
                                   {in}, out, {in}, {out}, dt, op, opts.timeout);
    }
    Staging s;
    at::Tensor send = s.in(in);
    at::Tensor recv = s.out(out, false);
    auto start = [=](gw_request_t* req) {
      return GWT_NEED(gw_ireduce_scatter)(comm_, ptr(send), ptr(recv), recv.numel(), dt, op, req);
    };
    return launch(c10d::OpType::_REDUCE_SCATTER_BASE, "gradwire:reduce_scatter_tensor", name, {in}, {out}, s, start,
                  opts.timeout);
  }

  // ---- data movement

  c10::intrusive_ptr<c10d::Work> broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) override {
    const char* name = "broadcast";
    const at::Tensor& t = single(tensors, name);
    TORCH_CHECK(opts.rootTensor == 0, "gradwire backend: ", name, ": rootTensor must be 0");
    const int root = check_root(opts.rootRank, name);
    if (Accelerator* acc = accel_for(tensors)) {
      DeviceBuffer b = device_buffer(*acc, t);
      at::Tensor flat = b.flat, user = t;
      DeviceOp d{c10d::OpType::BROADCAST,
                 "gradwire:broadcast",
                 name,
                 tensors,
                 tensors,
                 t,
                 {flat},
                 nullptr,
                 [this, flat, root](gw_request_t* req, void* stream) {
                   return GWT_NEED(gw_ibroadcast_device)(comm_, ptr(flat), nbytes(flat), root, stream, req);
                 },
                 nullptr,
                 opts.timeout};
      if (b.temp) {
        d.pack = [flat, user]() { flat.view(user.sizes()).copy_(user); };
        d.unpack = [flat, user]() { user.copy_(flat.view(user.sizes())); };
      }
      return launch_device(*acc, std::move(d));
    }
    Staging s;
    at::Tensor b = s.out(t, rank_ == root);
    auto start = [=](gw_request_t* req) { return GWT_NEED(gw_ibroadcast)(comm_, ptr(b), nbytes(b), root, req); };
    return launch(c10d::OpType::BROADCAST, "gradwire:broadcast", name, tensors, tensors, s, start, opts.timeout);
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<Tensors>& outputs, Tensors& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    const char* name = "all_gather";
    const at::Tensor& in = single(inputs, name);
    const Tensors& outs = single_list(outputs, name);
    TORCH_CHECK(static_cast<int>(outs.size()) == size_, "gradwire backend: ", name, ": ", outs.size(),
                " output tensors for ", size_, " ranks");
    bool equal = true;
    std::vector<size_t> sizes;
    size_t total = 0;
    for (const auto& o : outs) {
      same_type(o, in, name);
      equal = equal && o.numel() == in.numel();
      sizes.push_back(nbytes(o));
      total += nbytes(o);
    }
    TORCH_CHECK(sizes[rank_] == nbytes(in), "gradwire backend: ", name, ": output ", rank_, " (this rank's) has ",
                outs[rank_].numel(), " elements but the input has ", in.numel());
    Tensors everything = flatten(outputs);
    everything.push_back(in);
    if (Accelerator* acc = accel_for(everything)) {
      if (equal)
        return gather_device(*acc, c10d::OpType::ALLGATHER, "gradwire:all_gather", name, inputs, flatten(outputs), outs,
                             opts.timeout);
      at::Tensor send_host = acc->empty_host(static_cast<int64_t>(nbytes(in)));
      at::Tensor recv_host = acc->empty_host(static_cast<int64_t>(total));
      auto held = std::make_shared<std::vector<size_t>>(sizes);
      auto start = [=](gw_request_t* req) {
        return GWT_NEED(gw_iallgatherv)(comm_, ptr(send_host), nbytes(send_host), ptr(recv_host), held->data(), nullptr,
                                        req);
      };
      return launch_staged(*acc, c10d::OpType::ALLGATHER, "gradwire:all_gather", name, inputs, outs, in, send_host,
                           recv_host, start, opts.timeout);
    }
    Staging s;
    at::Tensor send = s.in(in);
    at::Tensor recv = s.scratch(static_cast<int64_t>(total), at::kByte);
    auto finalize = [recv, outs]() {
      size_t off = 0;
      for (const auto& o : outs) {
        unpack_into(o, bytes_of(recv) + off);
        off += nbytes(o);
      }
    };
    Tensors flat = flatten(outputs);
    if (equal) {
      auto start = [=](gw_request_t* req) {
        return GWT_NEED(gw_iallgather)(comm_, ptr(send), ptr(recv), nbytes(send), req);
      };
      return launch(c10d::OpType::ALLGATHER, "gradwire:all_gather", name, inputs, flat, s, start, opts.timeout,
                    finalize);
    }
    auto held = std::make_shared<std::vector<size_t>>(sizes);
    auto start = [=](gw_request_t* req) {
      return GWT_NEED(gw_iallgatherv)(comm_, ptr(send), nbytes(send), ptr(recv), held->data(), nullptr, req);
    };
    return launch(c10d::OpType::ALLGATHER, "gradwire:all_gather", name, inputs, flat, s, start, opts.timeout, finalize,
                  held);
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                                 const c10d::AllgatherOptions& opts) override {
    const char* name = "all_gather_into_tensor";
    same_type(in, out, name);
    TORCH_CHECK(out.numel() == in.numel() * size_, "gradwire backend: ", name, ": the output has ", out.numel(),
                " elements, expected world size (", size_, ") x input (", in.numel(), ")");
    if (Accelerator* acc = accel_for(Tensors{in, out})) {
      if (in.is_contiguous() && out.is_contiguous()) {
        at::Tensor i = in, o = out;
        DeviceOp d{c10d::OpType::_ALLGATHER_BASE,
                   "gradwire:all_gather_into_tensor",
                   name,
                   {in},
                   {out},
                   out,
                   {},
                   nullptr,
                   [this, i, o](gw_request_t* req, void* stream) {
                     return GWT_NEED(gw_iallgather_device)(comm_, ptr(i), ptr(o), nbytes(i), stream, req);
                   },
                   nullptr,
                   opts.timeout};
        return launch_device(*acc, std::move(d));
      }
      return gather_device(*acc, c10d::OpType::_ALLGATHER_BASE, "gradwire:all_gather_into_tensor", name, {in}, {out},
                           {out}, opts.timeout);
    }
    Staging s;
    at::Tensor send = s.in(in);
    at::Tensor recv = s.out(out, false);
    auto start = [=](gw_request_t* req) {
      return GWT_NEED(gw_iallgather)(comm_, ptr(send), ptr(recv), nbytes(send), req);
    };
    return launch(c10d::OpType::_ALLGATHER_BASE, "gradwire:all_gather_into_tensor", name, {in}, {out}, s, start,
                  opts.timeout);
  }

  // Inputs of any shapes and dtypes, packed into one all-gather. torch's layout:
  // outputLists[r][i] receives input i of rank r (every rank passes the same shapes).
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<Tensors>& outputLists, Tensors& inputs,
                                                     const c10d::AllgatherOptions& opts) override {
    const char* name = "all_gather_coalesced";
    TORCH_CHECK(static_cast<int>(outputLists.size()) == size_, "gradwire backend: ", name, ": ", outputLists.size(),
                " output lists for ", size_, " ranks");
    Tensors per_rank;  // input i of rank r, in the packed order (rank-major)
    for (int r = 0; r < size_; ++r) {
      TORCH_CHECK(outputLists[r].size() == inputs.size(), "gradwire backend: ", name, ": output list ", r, " has ",
                  outputLists[r].size(), " tensors for ", inputs.size(), " inputs");
      for (size_t i = 0; i < inputs.size(); ++i) {
        same_type(outputLists[r][i], inputs[i], name);
        TORCH_CHECK(outputLists[r][i].numel() == inputs[i].numel(), "gradwire backend: ", name, ": output ", r, "/", i,
                    " has ", outputLists[r][i].numel(), " elements, input ", i, " has ", inputs[i].numel());
        per_rank.push_back(outputLists[r][i]);
      }
    }
    return gather_packed(c10d::OpType::ALLGATHER_COALESCED, "gradwire:all_gather_coalesced", name, inputs, per_rank,
                         flatten(outputLists), opts.timeout);
  }

#if TORCH_VERSION_MAJOR >= 2
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                                                 const c10d::AllgatherOptions& opts) override {
    const char* name = "all_gather_into_tensor_coalesced";
    TORCH_CHECK(outputs.size() == inputs.size(), "gradwire backend: ", name, ": ", outputs.size(), " outputs for ",
                inputs.size(), " inputs");
    Tensors per_rank;
    for (size_t i = 0; i < inputs.size(); ++i) {
      same_type(outputs[i], inputs[i], name);
      TORCH_CHECK(outputs[i].numel() == inputs[i].numel() * size_, "gradwire backend: ", name, ": output ", i, " has ",
                  outputs[i].numel(), " elements, expected world size x ", inputs[i].numel());
    }
    for (int r = 0; r < size_; ++r)
      for (size_t i = 0; i < inputs.size(); ++i) per_rank.push_back(outputs[i].reshape({size_, -1}).select(0, r));
    return gather_packed(c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED, "gradwire:all_gather_into_tensor_coalesced",
                         name, inputs, per_rank, outputs, opts.timeout);
  }
#endif

  c10::intrusive_ptr<c10d::Work> gather(std::vector<Tensors>& outputs, Tensors& inputs,
                                        const c10d::GatherOptions& opts) override {
    const char* name = "gather";
    const at::Tensor& in = single(inputs, name);
    const int root = check_root(opts.rootRank, name);
    Tensors outs;
    if (rank_ == root) {
      outs = single_list(outputs, name);
      check_list(outs, in, name, "output");
    } else {
      TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()), "gradwire backend: ", name,
                  ": only the root (rank ", root, ") takes output tensors");
    }
    Tensors everything = outs;
    everything.push_back(in);
    if (Accelerator* acc = accel_for(everything)) {
      // An all-gather the root keeps (gradwire has no device gather; it costs p-1 blocks more).
      return gather_device(*acc, c10d::OpType::GATHER, "gradwire:gather", name, inputs, outs, outs, opts.timeout);
    }
    Staging s;
    at::Tensor send = s.in(in);
    at::Tensor recv;
    if (rank_ == root) recv = s.scratch(static_cast<int64_t>(nbytes(in)) * size_, at::kByte);
    auto start = [=](gw_request_t* req) {
      return GWT_NEED(gw_igather)(comm_, ptr(send), recv.defined() ? ptr(recv) : nullptr, nbytes(send), root, req);
    };
    auto finalize = [recv, outs]() {
      size_t off = 0;
      for (const auto& o : outs) {
        unpack_into(o, bytes_of(recv) + off);
        off += nbytes(o);
      }
    };
    return launch(c10d::OpType::GATHER, "gradwire:gather", name, inputs, outs, s, start, opts.timeout, finalize);
  }

  c10::intrusive_ptr<c10d::Work> scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    const char* name = "scatter";
    const at::Tensor& out = single(outputs, name);
    const int root = check_root(opts.rootRank, name);
    Tensors ins;
    if (rank_ == root) {
      ins = single_list(inputs, name);
      check_list(ins, out, name, "input");
    } else {
      TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()), "gradwire backend: ", name,
                  ": only the root (rank ", root, ") takes input tensors");
    }
    Tensors everything = ins;
    everything.push_back(out);
    if (Accelerator* acc = accel_for(everything)) {
      // A broadcast of the root's packed inputs; each rank unpacks its block.
      std::function<void()> pack;
      at::Tensor buf;
      const int64_t block = static_cast<int64_t>(nbytes(out));
      if (rank_ == root) {
        buf = pack_device(*acc, ins, out.options(), &pack);
      } else {
        buf = acc->empty(block * size_, out.options().dtype(at::kByte));
      }
      const int64_t from = block * rank_;
      DeviceOp d{c10d::OpType::SCATTER,
                 "gradwire:scatter",
                 name,
                 ins,
                 outputs,
                 out,
                 {buf},
                 pack,
                 [this, buf, root](gw_request_t* req, void* stream) {
                   return GWT_NEED(gw_ibroadcast_device)(comm_, ptr(buf), nbytes(buf), root, stream, req);
                 },
                 [buf, from, out]() { unpack_bytes(buf, from, {out}); },
                 opts.timeout};
      return launch_device(*acc, std::move(d));
    }
    Staging s;
    at::Tensor send;
    if (rank_ == root) send = pack(s, ins, nullptr);
    at::Tensor recv = s.out(out, false);
    auto start = [=](gw_request_t* req) {
      return GWT_NEED(gw_iscatter)(comm_, send.defined() ? ptr(send) : nullptr, ptr(recv), nbytes(recv), root, req);
    };
    return launch(c10d::OpType::SCATTER, "gradwire:scatter", name, ins, outputs, s, start, opts.timeout);
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& outSplits,
                                               std::vector<int64_t>& inSplits,
                                               const c10d::AllToAllOptions& opts) override {
    const char* name = "all_to_all_single";
    same_type(in, out, name);
    if (Accelerator* acc = accel_for(Tensors{in, out})) {
      at::Tensor send_host = acc->empty_host(static_cast<int64_t>(nbytes(in)));
      at::Tensor recv_host = acc->empty_host(static_cast<int64_t>(nbytes(out)));
      Start start;
      if (outSplits.empty() && inSplits.empty()) {
        TORCH_CHECK(in.numel() % size_ == 0 && out.numel() == in.numel(), "gradwire backend: ", name, ": input (",
                    in.numel(), ") and output (", out.numel(),
                    ") must have the same size, divisible by the world size (", size_,
                    ") when no split sizes are given");
        const size_t block = nbytes(in) / size_;
        start = [=](gw_request_t* req) {
          return GWT_NEED(gw_ialltoall)(comm_, ptr(send_host), ptr(recv_host), block, req);
        };
      } else {
        auto held = std::make_shared<std::vector<size_t>>();
        split_bytes(in, inSplits, name, "input", held.get());
        split_bytes(out, outSplits, name, "output", held.get());
        start = [=](gw_request_t* req) {
          const size_t* v = held->data();
          const size_t n = static_cast<size_t>(size_);
          return GWT_NEED(gw_ialltoallv)(comm_, ptr(send_host), v, v + n, ptr(recv_host), v + 2 * n, v + 3 * n, req);
        };
      }
      return launch_staged(*acc, c10d::OpType::ALLTOALL_BASE, "gradwire:all_to_all_single", name, {in}, {out}, out,
                           send_host, recv_host, start, opts.timeout);
    }
    Staging s;
    at::Tensor send = s.in(in);
    at::Tensor recv = s.out(out, false);
    if (outSplits.empty() && inSplits.empty()) {
      TORCH_CHECK(in.numel() % size_ == 0 && out.numel() == in.numel(), "gradwire backend: ", name, ": input (",
                  in.numel(), ") and output (", out.numel(), ") must have the same size, divisible by the world size (",
                  size_, ") when no split sizes are given");
      const size_t block = nbytes(in) / size_;
      auto start = [=](gw_request_t* req) { return GWT_NEED(gw_ialltoall)(comm_, ptr(send), ptr(recv), block, req); };
      return launch(c10d::OpType::ALLTOALL_BASE, "gradwire:all_to_all_single", name, {in}, {out}, s, start,
                    opts.timeout);
    }
    auto held = std::make_shared<std::vector<size_t>>();
    split_bytes(in, inSplits, name, "input", held.get());
    split_bytes(out, outSplits, name, "output", held.get());
    auto start = [=](gw_request_t* req) {
      const size_t* v = held->data();
      const size_t n = static_cast<size_t>(size_);
      return GWT_NEED(gw_ialltoallv)(comm_, ptr(send), v, v + n, ptr(recv), v + 2 * n, v + 3 * n, req);
    };
    return launch(c10d::OpType::ALLTOALL_BASE, "gradwire:all_to_all_single", name, {in}, {out}, s, start, opts.timeout,
                  nullptr, held);
  }

  c10::intrusive_ptr<c10d::Work> alltoall(Tensors& outputs, Tensors& inputs,
                                          const c10d::AllToAllOptions& opts) override {
    const char* name = "all_to_all";
    TORCH_CHECK(static_cast<int>(outputs.size()) == size_ && static_cast<int>(inputs.size()) == size_,
                "gradwire backend: ", name, ": ", inputs.size(), " inputs and ", outputs.size(), " outputs for ", size_,
                " ranks");
    for (int r = 0; r < size_; ++r) {
      same_type(inputs[r], inputs[0], name);
      same_type(outputs[r], inputs[0], name);
    }
    Tensors everything = inputs;
    everything.insert(everything.end(), outputs.begin(), outputs.end());
    if (Accelerator* acc = accel_for(everything)) {
      auto held = std::make_shared<std::vector<size_t>>(4 * size_);
      size_t in_total = 0, out_total = 0;
      for (int r = 0; r < size_; ++r) {
        (*held)[r] = nbytes(inputs[r]);
        (*held)[size_ + r] = in_total;
        (*held)[2 * size_ + r] = nbytes(outputs[r]);
        (*held)[3 * size_ + r] = out_total;
        in_total += nbytes(inputs[r]);
        out_total += nbytes(outputs[r]);
      }
      at::Tensor send_host = acc->empty_host(static_cast<int64_t>(in_total));
      at::Tensor recv_host = acc->empty_host(static_cast<int64_t>(out_total));
      auto start = [=](gw_request_t* req) {
        const size_t* v = held->data();
        const size_t n = static_cast<size_t>(size_);
        return GWT_NEED(gw_ialltoallv)(comm_, ptr(send_host), v, v + n, ptr(recv_host), v + 2 * n, v + 3 * n, req);
      };
      return launch_staged(*acc, c10d::OpType::ALLTOALL, "gradwire:all_to_all", name, inputs, outputs, inputs[0],
                           send_host, recv_host, start, opts.timeout);
    }
    Staging s;
    std::vector<size_t> offsets;
    at::Tensor send = pack(s, inputs, &offsets);
    auto held = std::make_shared<std::vector<size_t>>(4 * size_);
    size_t total = 0;
    for (int r = 0; r < size_; ++r) {
      (*held)[r] = nbytes(inputs[r]);
      (*held)[size_ + r] = offsets[r];
      (*held)[2 * size_ + r] = nbytes(outputs[r]);
      (*held)[3 * size_ + r] = total;
      total += nbytes(outputs[r]);
    }
    at::Tensor recv = s.scratch(static_cast<int64_t>(total), at::kByte);
    Tensors outs = outputs;
    auto start = [=](gw_request_t* req) {
      const size_t* v = held->data();
      const size_t n = static_cast<size_t>(size_);
      return GWT_NEED(gw_ialltoallv)(comm_, ptr(send), v, v + n, ptr(recv), v + 2 * n, v + 3 * n, req);
    };
    auto finalize = [recv, outs, held, this]() {
      for (int r = 0; r < size_; ++r) unpack_into(outs[r], bytes_of(recv) + (*held)[3 * size_ + r]);
    };
    return launch(c10d::OpType::ALLTOALL, "gradwire:all_to_all", name, inputs, outputs, s, start, opts.timeout,
                  finalize, held);
  }

  // ---- point to point

  c10::intrusive_ptr<c10d::Work> send(Tensors& tensors, int dst, int tag) override {
    const char* name = "send";
    const at::Tensor& t = single(tensors, name);
    check_peer(dst, name);
    if (Accelerator* acc = accel_for(tensors)) {
      at::Tensor host = acc->empty_host(static_cast<int64_t>(nbytes(t)));
      auto start = [=](gw_request_t* req) {
        return GWT_NEED(gw_isend)(comm_, ptr(host), nbytes(host), dst, static_cast<uint32_t>(tag), req);
      };
      return launch_staged(*acc, c10d::OpType::SEND, "gradwire:send", name, tensors, {}, t, host, at::Tensor(), start,
                           Ms(-1));
    }
    Staging s;
    at::Tensor b = s.in(t);
    auto start = [=](gw_request_t* req) {
      return GWT_NEED(gw_isend)(comm_, ptr(b), nbytes(b), dst, static_cast<uint32_t>(tag), req);
    };
    return launch(c10d::OpType::SEND, "gradwire:send", name, tensors, {}, s, start, Ms(-1));
  }

  c10::intrusive_ptr<c10d::Work> recv(Tensors& tensors, int src, int tag) override {
    const char* name = "recv";
    const at::Tensor& t = single(tensors, name);
    check_peer(src, name);
    if (Accelerator* acc = accel_for(tensors)) {
      at::Tensor host = acc->empty_host(static_cast<int64_t>(nbytes(t)));
      auto start = [=](gw_request_t* req) {
        return GWT_NEED(gw_irecv)(comm_, ptr(host), nbytes(host), src, static_cast<uint32_t>(tag), req);
      };
      return launch_staged(*acc, c10d::OpType::RECV, "gradwire:recv", name, {}, tensors, t, at::Tensor(), host, start,
                           Ms(-1));
    }
    Staging s;
    at::Tensor b = s.out(t, false);
    auto start = [=](gw_request_t* req) {
      return GWT_NEED(gw_irecv)(comm_, ptr(b), nbytes(b), src, static_cast<uint32_t>(tag), req);
    };
    return launch(c10d::OpType::RECV, "gradwire:recv", name, {}, tensors, s, start, Ms(-1));
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(Tensors&, int) override {
    TORCH_CHECK_NOT_IMPLEMENTED(false, "gradwire backend: recv from any source is not supported; name the source rank");
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    Staging s;
    auto start = [=](gw_request_t* req) { return GWT_NEED(gw_ibarrier)(comm_, req); };
    return launch(c10d::OpType::BARRIER, "gradwire:barrier", "barrier", {}, {}, s, start, opts.timeout);
  }

 private:
  using Start = std::function<gw_result_t(gw_request_t*)>;

  c10::intrusive_ptr<c10d::Work> launch(c10d::OpType type, const char* title, const char* name, const Tensors& inputs,
                                        const Tensors& outputs, const Staging& s, const Start& start, Ms op_timeout,
                                        std::function<void()> finalize = nullptr,
                                        std::shared_ptr<std::vector<size_t>> held = nullptr) {
    const Ms timeout = op_timeout > Ms(0) ? op_timeout : timeout_;
    auto work = c10::make_intrusive<GradwireWork>(rank_, type, title, name, inputs, outputs, timeout);
    auto copies = s.copies();
    if (!copies.empty()) {
      auto inner = std::move(finalize);
      finalize = [inner, copies]() {
        if (inner) inner();
        for (const auto& c : copies) c.first.copy_(c.second);
      };
    }
    auto p = std::make_unique<Pending>();
    p->work = work;
    p->finalize = std::move(finalize);
    p->keep = s.kept();
    if (held) p->sizes = *held;
    gw_result_t r = GW_SUCCESS;
    {
      std::lock_guard<std::mutex> lock(submit_mutex_);  // one call order on every rank
      TORCH_CHECK(comm_ != nullptr, "gradwire backend: ", name,
                  ": the group was shut down (destroy_process_group or interpreter exit)");
      r = start(&p->request);
    }
    if (type != c10d::OpType::SEND && type != c10d::OpType::RECV) seq_.fetch_add(1);
    if (r != GW_SUCCESS) {
      const std::string message = describe(r, last_error());
      std::runtime_error e(std::string("gradwire ") + name + " failed: " + message);
      work->complete(std::make_exception_ptr(e));
      throw e;
    }
    completer_->add(std::move(p));
    return work;
  }

  // ---- the device path (device_streams.hpp)

  // An all-gather of the inputs' bytes (packed on the caller's stream) into a device temporary,
  // unpacked on the group's stream into per_rank (rank after rank, each rank's inputs in order;
  // empty: nothing kept, as on a gather's other ranks).
  c10::intrusive_ptr<c10d::Work> gather_device(Accelerator& acc, c10d::OpType type, const char* title, const char* name,
                                               const Tensors& inputs, const Tensors& outputs, const Tensors& per_rank,
                                               Ms timeout) {
    std::function<void()> pack;
    at::Tensor send = pack_device(acc, inputs, inputs[0].options(), &pack);
    at::Tensor recv = acc.empty(send.numel() * size_, send.options());
    Tensors outs = per_rank;
    DeviceOp d{type,
               title,
               name,
               inputs,
               outputs,
               inputs[0],
               {send, recv},
               pack,
               [this, send, recv](gw_request_t* req, void* stream) {
                 return GWT_NEED(gw_iallgather_device)(comm_, ptr(send), ptr(recv), nbytes(send), stream, req);
               },
               [recv, outs]() { unpack_bytes(recv, 0, outs); },
               timeout};
    return launch_device(acc, std::move(d));
  }

  // A reduce-scatter as an all-reduce of the packed input into a device temporary (so NCCL or
  // the device path serves it), this rank's block unpacked on the group's stream.
  c10::intrusive_ptr<c10d::Work> device_reduce_scatter(Accelerator& acc, c10d::OpType type, const char* title,
                                                       const char* name, const Tensors& ins, const at::Tensor& out,
                                                       const Tensors& work_inputs, const Tensors& work_outputs,
                                                       gw_dtype_t dt, gw_red_op_t op, Ms timeout) {
    std::function<void()> pack;
    at::Tensor bytes = pack_device(acc, ins, out.options(), &pack);
    at::Tensor buf = bytes.view(out.scalar_type());
    const int64_t n = out.numel();
    const int64_t from = static_cast<int64_t>(rank_) * n * static_cast<int64_t>(out.element_size());
    DeviceOp d{type,
               title,
               name,
               work_inputs,
               work_outputs,
               out,
               {bytes},
               pack,
               allreduce_start(buf, dt, op),
               [bytes, from, out]() { unpack_bytes(bytes, from, {out}); },
               timeout};
    return launch_device(acc, std::move(d));
  }

  static bool env_flag(const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr && std::strcmp(v, "1") == 0;
  }

  // The accelerator a tensor's op runs on: CUDA for CUDA tensors (when the extension has it),
  // the stand-in for stand-in memory (stand-in groups); null: the host path.
  Accelerator* accel_for(const at::Tensor& t) const {
    if (t.is_cuda()) return cuda_.get();
    if (standin_ != nullptr && standin_->holds(t)) return standin_.get();
    return nullptr;
  }
  Accelerator* accel_for(const Tensors& ts) const {
    Accelerator* a = nullptr;
    for (const auto& t : ts) {
      if (!t.defined() || t.numel() == 0) continue;
      Accelerator* b = accel_for(t);
      if (b == nullptr && t.is_cuda()) {
        warn_once_staged();
        return nullptr;
      }
      if (a != nullptr && b != a) return nullptr;  // a mix: the host path stages each one
      a = b;
    }
    return a;
  }
  void warn_once_staged() const {
    static std::once_flag once;
    std::call_once(once, [] {
      TORCH_WARN(
          "gradwire backend: this extension was built without CUDA; CUDA tensors are staged through host "
          "memory (rebuild it where torch has CUDA and a CUDA toolkit is found)");
    });
  }

  // Brings up what the device path needs: the stand-in (BackendOptions(standin=True) or
  // GRADWIRE_TORCH_STANDIN=1), else CUDA and, when every rank has a GPU of its own, NCCL.
  void set_up_devices(StoreGather& g) {
    const auto it = options_.find("standin");
    if ((it != options_.end() && it->second == "1") || env_flag("GRADWIRE_TORCH_STANDIN")) {
      StandInApi a;
      a.stream_enqueue = reinterpret_cast<decltype(a.stream_enqueue)>(GWT_NEED(gw_standin_stream_enqueue));
      a.event_record = reinterpret_cast<decltype(a.event_record)>(GWT_NEED(gw_standin_event_record));
      a.stream_wait_event = reinterpret_cast<decltype(a.stream_wait_event)>(GWT_NEED(gw_standin_stream_wait_event));
      a.event_synchronize = reinterpret_cast<decltype(a.event_synchronize)>(GWT_NEED(gw_standin_event_synchronize));
      a.stream_create = reinterpret_cast<decltype(a.stream_create)>(GWT_NEED(gw_standin_stream_create));
      a.malloc_ = reinterpret_cast<decltype(a.malloc_)>(GWT_NEED(gw_standin_malloc));
      a.free_ = reinterpret_cast<decltype(a.free_)>(GWT_NEED(gw_standin_free));
      a.current = reinterpret_cast<decltype(a.current)>(GWT_NEED(gw_standin_current_stream));
      a.contains = reinterpret_cast<decltype(a.contains)>(GWT_NEED(gw_standin_contains));
      const gw_result_t r = GWT_NEED(gw_comm_use_standin)(comm_, 300, 0x51a4d + static_cast<uint64_t>(rank_));
      TORCH_CHECK(r == GW_SUCCESS, "gradwire backend: the stand-in accelerator: ", describe(r, last_error()));
      standin_ = std::make_unique<StandInAccelerator>(a);
      return;
    }
#ifdef GW_TORCH_CUDA
    if (!at::cuda::is_available() || at::cuda::device_count() == 0) {
      no_nccl_why_ = "no CUDA device";
      return;
    }
    cuda_ = std::make_unique<CudaAccelerator>();
    // gradwire's device scratch and EF residuals from torch's caching allocator, so that
    // torch.cuda.memory_allocated() counts them and torch.cuda.empty_cache() can give them back
    // (GRADWIRE_TORCH_OWN_ALLOCATOR=1 keeps gradwire's own pools).
    if (!env_flag("GRADWIRE_TORCH_OWN_ALLOCATOR") && api().gw_set_device_allocator != nullptr) {
      api().gw_set_device_allocator(&torch_device_alloc, &torch_device_free, nullptr);
    }
    // NCCL wants one GPU per rank: the ranks compare (host, PCI bus id) of their current device
    // through the store first, so ranks that share a GPU fall back together, and say so once.
    char bus[64] = {0};
    const int dev = c10::cuda::current_device();
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, dev) != cudaSuccess) std::snprintf(bus, sizeof bus, "device%d", dev);
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    std::string mine = std::string(host) + "/" + bus;
    mine.resize(320, '\0');
    std::vector<char> all(mine.size() * static_cast<size_t>(size_));
    if (store_allgather(&g, mine.data(), all.data(), mine.size()) != GW_SUCCESS) {
      TORCH_CHECK(false, "gradwire backend: exchanging GPU identities through the store failed: ", g.error);
    }
    std::map<std::string, int> seen;
    for (int r = 0; r < size_; ++r) {
      const std::string id(all.data() + static_cast<size_t>(r) * mine.size());
      if (seen.count(id)) {
        no_nccl_why_ = "ranks " + std::to_string(seen[id]) + " and " + std::to_string(r) + " share GPU " + id;
        if (rank_ == 0) {
          TORCH_WARN("gradwire backend: ", no_nccl_why_,
                     ": NCCL needs a GPU per rank, so dense CUDA ops run on "
                     "gradwire's device path over its transport (UCX) instead");
        }
        return;
      }
      seen[id] = r;
    }
    const gw_result_t r = GWT_NEED(gw_comm_enable_nccl)(comm_);
    if (r == GW_SUCCESS) {
      nccl_ = true;
    } else {
      no_nccl_why_ = describe(r, last_error());
      if (rank_ == 0)
        TORCH_WARN("gradwire backend: NCCL did not start (", no_nccl_why_,
                   "); dense CUDA ops run on "
                   "gradwire's device path over its transport");
    }
#else
    (void)g;
    no_nccl_why_ = "extension built without CUDA";
#endif
  }

#ifdef GW_TORCH_CUDA
  static void* torch_device_alloc(size_t bytes, int device, void* stream, void*) {
    try {
      c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
      return c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(bytes, static_cast<cudaStream_t>(stream));
    } catch (...) {
      return nullptr;  // gradwire reports it as out of memory
    }
  }
  static void torch_device_free(void* p, int, void*, void*) { c10::cuda::CUDACachingAllocator::raw_delete(p); }
#endif

  void check_async_error(const char* name) {
    std::lock_guard<std::mutex> lock(async_mutex_);
    TORCH_CHECK(async_error_.empty(), "gradwire ", name,
                ": an earlier op on this group failed after its Work was "
                "waited on its stream: ",
                async_error_);
  }

  using DeviceStart = std::function<gw_result_t(gw_request_t*, void* stream)>;
  struct DeviceOp {
    c10d::OpType type;
    const char* title;
    const char* name;
    Tensors inputs;
    Tensors outputs;
    at::Tensor anchor;           // names the device (and so the caller's stream)
    Tensors keep;                // temporaries the op's streams use
    std::function<void()> pack;  // on the caller's stream, before the call
    DeviceStart start;
    std::function<void()> unpack;  // on the group's stream, after the call
    Ms timeout{-1};
  };

  // A device op in ProcessGroupNCCL's order (device_streams.hpp): pack on the caller's stream
  // S, the gradwire call ordered after it, the group's stream B waiting for the request, unpack
  // on B, the end event E on B; wait() makes the caller's stream wait for E.
  c10::intrusive_ptr<c10d::Work> launch_device(Accelerator& acc, DeviceOp op) {
    check_async_error(op.name);
    const DevStream S = acc.current_stream(op.anchor);
    const DevStream B = acc.group_stream(op.anchor);
    const Ms timeout = op.timeout > Ms(0) ? op.timeout : timeout_;
    auto work = c10::make_intrusive<GradwireWork>(rank_, op.type, op.title, op.name, op.inputs, op.outputs, timeout);
    auto p = std::make_unique<Pending>();
    p->work = work;
    p->keep = op.keep;
    p->keep.insert(p->keep.end(), op.inputs.begin(), op.inputs.end());
    p->keep.insert(p->keep.end(), op.outputs.begin(), op.outputs.end());
    if (op.pack) acc.run_on(S, op.pack);
    gw_result_t r = GW_SUCCESS;
    {
      std::lock_guard<std::mutex> lock(submit_mutex_);
      TORCH_CHECK(comm_ != nullptr, "gradwire backend: ", op.name,
                  ": the group was shut down (destroy_process_group or interpreter exit)");
      r = op.start(&p->request, S.handle);
    }
    seq_.fetch_add(1);
    if (r != GW_SUCCESS) {
      const std::string message = describe(r, last_error());
      std::runtime_error e(std::string("gradwire ") + op.name + " failed: " + message);
      work->complete(std::make_exception_ptr(e));
      throw e;
    }
    bool blocking = blocking_wait_;
    const gw_result_t w = drop_wait("group") ? GW_SUCCESS : GWT_NEED(gw_request_stream_wait)(p->request, B.handle);
    std::shared_ptr<StreamEvent> end;
    if (w == GW_SUCCESS) {
      if (op.unpack) acc.run_on(B, op.unpack);
      end = acc.record(B);
      p->before_release = [&acc, end]() { acc.host_wait(*end); };
    } else {
      // The stream could not be made to wait: unpack once the request is done, on the host's
      // word, and make wait() block.
      blocking = true;
      auto unpack = op.unpack;
      p->before_release = [&acc, B, unpack]() {
        if (unpack) acc.run_on(B, unpack);
        acc.host_wait(*acc.record(B));
      };
      end = nullptr;
    }
    p->on_error = [this](const std::string& what) {
      std::lock_guard<std::mutex> lock(async_mutex_);
      if (async_error_.empty()) async_error_ = what;
    };
    c10::intrusive_ptr<c10::ivalue::Future> on_stream;
    if (!blocking && end != nullptr) on_stream = acc.completed_future(op.outputs, B);
    work->set_device(&acc, end, op.anchor, blocking || end == nullptr, on_stream);
    completer_->add(std::move(p));
    return work;
  }

  // Contiguous device memory holding t's elements: t itself, or a temporary packed on the
  // caller's stream (copy_in) and unpacked on the group's (copy_out).
  struct DeviceBuffer {
    at::Tensor flat;  // what gradwire reads and writes
    bool temp = false;
  };
  DeviceBuffer device_buffer(Accelerator& acc, const at::Tensor& t) {
    if (t.is_contiguous()) return DeviceBuffer{t, false};
    return DeviceBuffer{acc.empty(t.numel(), t.options().memory_format(at::MemoryFormat::Contiguous)), true};
  }

  // The bytes of a contiguous tensor.
  static at::Tensor as_bytes(const at::Tensor& t) { return t.reshape({-1}).view(at::kByte); }

  // Packs the tensors' bytes into one device buffer (on the caller's stream when run).
  at::Tensor pack_device(Accelerator& acc, const Tensors& ts, const at::TensorOptions& opts,
                         std::function<void()>* pack) {
    int64_t total = 0;
    for (const auto& t : ts) total += static_cast<int64_t>(nbytes(t));
    at::Tensor buf = acc.empty(total, opts.dtype(at::kByte));
    Tensors ins = ts;
    *pack = [buf, ins]() {
      int64_t off = 0;
      for (const auto& t : ins) {
        const int64_t n = static_cast<int64_t>(nbytes(t));
        if (n > 0) buf.narrow(0, off, n).copy_(as_bytes(t.contiguous()));
        off += n;
      }
    };
    return buf;
  }

  // Copies consecutive slices of src's bytes (from byte offset `from`) into the tensors.
  static void unpack_bytes(const at::Tensor& src, int64_t from, const Tensors& outs) {
    int64_t off = from;
    for (const auto& o : outs) {
      const int64_t n = static_cast<int64_t>(nbytes(o));
      if (n > 0) {
        at::Tensor piece = src.narrow(0, off, n);
        // non_blocking: from pinned staging the copy is ordered on the stream, not waited for.
        if (o.is_contiguous()) {
          as_bytes(o).copy_(piece, /*non_blocking=*/true);
        } else {
          o.copy_(piece.view(o.scalar_type()).view(o.sizes()), /*non_blocking=*/true);
        }
      }
      off += n;
    }
  }

  // An all-reduce of a device buffer in place (dense; op and dtype as c10d gave them).
  DeviceStart allreduce_start(const at::Tensor& buf, gw_dtype_t dt, gw_red_op_t op) {
    return [this, buf, dt, op](gw_request_t* req, void* stream) {
      return GWT_NEED(gw_iallreduce_device)(comm_, ptr(buf), ptr(buf), buf.numel(), dt, op, nullptr, nullptr,
                                            GW_ALGO_AUTO, stream, req);
    };
  }

  // A host collective on pinned staging for device tensors where gradwire has no device call
  // (all-to-all, all-gather of unequal sizes, point-to-point): the inputs are copied down on
  // the caller's stream and waited for on the host (the one host wait of the device path),
  // the host call is made, and the outputs are copied up on the group's stream once the request
  // is done. Point-to-point requests cannot be waited on a stream, so their Works block.
  c10::intrusive_ptr<c10d::Work> launch_staged(Accelerator& acc, c10d::OpType type, const char* title, const char* name,
                                               const Tensors& inputs, const Tensors& outputs, const at::Tensor& anchor,
                                               const at::Tensor& send_host, const at::Tensor& recv_host,
                                               const Start& start, Ms op_timeout) {
    const DevStream S = acc.current_stream(anchor);
    if (send_host.defined() && !inputs.empty()) {
      at::Tensor dst = send_host;
      Tensors ins = inputs;
      acc.run_on(S, [dst, ins]() {
        int64_t off = 0;
        for (const auto& t : ins) {
          const int64_t n = static_cast<int64_t>(nbytes(t));
          if (n > 0) dst.narrow(0, off, n).copy_(as_bytes(t.contiguous()), /*non_blocking=*/true);
          off += n;
        }
      });
      acc.host_wait(*acc.record(S));
    }
    const bool p2p = type == c10d::OpType::SEND || type == c10d::OpType::RECV;
    DeviceOp op{type, title, name, inputs, outputs, anchor, {}, nullptr, nullptr, nullptr, op_timeout};
    if (send_host.defined()) op.keep.push_back(send_host);
    if (recv_host.defined()) op.keep.push_back(recv_host);
    op.start = [start](gw_request_t* req, void*) { return start(req); };
    if (recv_host.defined() && !outputs.empty()) {
      at::Tensor src = recv_host;
      Tensors outs = outputs;
      op.unpack = [src, outs]() { unpack_bytes(src, 0, outs); };
    }
    if (!p2p) return launch_device(acc, std::move(op));
    // Point-to-point: the host path, then the outputs copied up before the Work finishes.
    Staging s;
    for (const auto& t : op.keep) s.hold(t);
    std::function<void()> finalize;
    if (op.unpack) {
      const DevStream B = acc.group_stream(anchor);
      auto unpack = op.unpack;
      finalize = [&acc, B, unpack]() {
        acc.run_on(B, unpack);
        acc.host_wait(*acc.record(B));
      };
    }
    return launch(type, title, name, inputs, outputs, s, start, op_timeout, finalize);
  }

 public:
  // Pending requests get `grace` to finish, then the communicator is aborted (they fail);
  // either way the completion thread has let go of every Work before the connections close.
  void shutdown_comm(Ms grace = Ms::max()) {
    std::lock_guard<std::mutex> closing(close_mutex_);
    gw_comm_t comm = nullptr;
    {
      std::lock_guard<std::mutex> lock(submit_mutex_);
      std::swap(comm, comm_);
    }
    if (comm == nullptr) return;
    if (grace == Ms::max()) {
      completer_->drain();
    } else if (!completer_->drain_for(grace)) {
      GWT_NEED(gw_comm_abort)(comm);
      completer_->drain();
    }
    api().gw_comm_destroy(comm);
  }

 private:
  int check_root(int64_t root, const char* op) const {
    TORCH_CHECK(root >= 0 && root < size_, "gradwire backend: ", op, ": root ", root, " is not a rank of ", size_);
    return static_cast<int>(root);
  }

  void check_peer(int peer, const char* op) const {
    TORCH_CHECK(peer >= 0 && peer < size_ && peer != rank_, "gradwire backend: ", op, ": peer ", peer,
                " is not another rank of ", size_);
  }

  const Tensors& single_list(const std::vector<Tensors>& lists, const char* op) const {
    TORCH_CHECK_NOT_IMPLEMENTED(lists.size() == 1, "gradwire backend: ", op, " takes one tensor list per process, got ",
                                lists.size());
    return lists[0];
  }

  // A list of world-size tensors, each the size and dtype of t.
  void check_list(const Tensors& list, const at::Tensor& t, const char* op, const char* what) const {
    TORCH_CHECK(static_cast<int>(list.size()) == size_, "gradwire backend: ", op, ": ", list.size(), " ", what,
                " tensors for ", size_, " ranks");
    for (const auto& x : list) {
      same_type(x, t, op);
      TORCH_CHECK_NOT_IMPLEMENTED(x.numel() == t.numel(), "gradwire backend: ", op, ": ", what, " tensors of ",
                                  x.numel(), " and ", t.numel(), " elements; unequal sizes are not supported");
    }
  }

  // Appends counts and displacements (bytes) of t split along dim 0 into splits rows.
  void split_bytes(const at::Tensor& t, const std::vector<int64_t>& splits, const char* op, const char* what,
                   std::vector<size_t>* v) const {
    TORCH_CHECK(t.dim() >= 1, "gradwire backend: ", op, ": split sizes need an ", what, " of at least one dimension");
    const int64_t rows = t.size(0);
    const size_t row_bytes = rows ? nbytes(t) / rows : 0;
    std::vector<int64_t> counts = splits;
    if (counts.empty()) {
      TORCH_CHECK(rows % size_ == 0, "gradwire backend: ", op, ": ", what, " has ", rows,
                  " rows, not divisible by the world size ", size_);
      counts.assign(size_, rows / size_);
    }
    TORCH_CHECK(static_cast<int>(counts.size()) == size_, "gradwire backend: ", op, ": ", counts.size(), " ", what,
                " split sizes for ", size_, " ranks");
    int64_t sum = 0;
    for (int64_t c : counts) {
      TORCH_CHECK(c >= 0, "gradwire backend: ", op, ": negative ", what, " split size ", c);
      sum += c;
    }
    TORCH_CHECK(sum == rows, "gradwire backend: ", op, ": ", what, " split sizes add up to ", sum, ", but it has ",
                rows, " rows");
    size_t off = 0;
    std::vector<size_t> bytes, displs;
    for (int64_t c : counts) {
      bytes.push_back(static_cast<size_t>(c) * row_bytes);
      displs.push_back(off);
      off += static_cast<size_t>(c) * row_bytes;
    }
    v->insert(v->end(), bytes.begin(), bytes.end());
    v->insert(v->end(), displs.begin(), displs.end());
  }

  static Tensors flatten(const std::vector<Tensors>& lists) {
    Tensors all;
    for (const auto& l : lists) all.insert(all.end(), l.begin(), l.end());
    return all;
  }

  // All-gather of the inputs packed together; per_rank lists, rank after rank, the tensors
  // that receive each rank's inputs (in input order).
  c10::intrusive_ptr<c10d::Work> gather_packed(c10d::OpType type, const char* title, const char* name,
                                               const Tensors& inputs, const Tensors& per_rank, const Tensors& outputs,
                                               Ms timeout) {
    Tensors everything = per_rank;
    everything.insert(everything.end(), inputs.begin(), inputs.end());
    if (Accelerator* acc = inputs.empty() ? nullptr : accel_for(everything)) {
      return gather_device(*acc, type, title, name, inputs, outputs, per_rank, timeout);
    }
    Staging s;
    at::Tensor send = pack(s, inputs, nullptr);
    at::Tensor recv = s.scratch(static_cast<int64_t>(nbytes(send)) * size_, at::kByte);
    auto start = [=](gw_request_t* req) {
      return GWT_NEED(gw_iallgather)(comm_, ptr(send), ptr(recv), nbytes(send), req);
    };
    auto finalize = [recv, per_rank]() {
      size_t off = 0;
      for (const auto& o : per_rank) {
        unpack_into(o, bytes_of(recv) + off);
        off += nbytes(o);
      }
    };
    return launch(type, title, name, inputs, outputs, s, start, timeout, finalize);
  }

  gw_comm_t comm_ = nullptr;
  std::unique_ptr<Accelerator> cuda_;            // CUDA tensors' path (GW_TORCH_CUDA builds)
  std::unique_ptr<StandInAccelerator> standin_;  // a stand-in group's
  bool nccl_ = false;                            // gw_comm_enable_nccl succeeded
  std::string no_nccl_why_;
  bool blocking_wait_ = false;  // GRADWIRE_TORCH_BLOCKING_WAIT=1
  std::mutex async_mutex_;
  std::string async_error_;  // the first failure of a device op waited on a stream
  Ms timeout_;
  std::map<std::string, std::string> options_;
  std::mutex submit_mutex_;  // guards comm_ too
  std::mutex close_mutex_;
  std::atomic<uint64_t> seq_{0};
  std::unique_ptr<Completer> completer_ = std::make_unique<Completer>();
};

void LiveBackends::shutdown_all(Ms grace) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (GradwireBackend* b : backends_) b->shutdown_comm(grace);
}

// Every CPU tensor torch allocates from now on is stand-in device memory (tests: DDP and
// plain c10d calls then take the stand-in device path end to end).
class StandInCpuAllocator final : public c10::Allocator {
 public:
#if TORCH_VERSION_MAJOR >= 2
  c10::DataPtr allocate(size_t n) override { return make(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
#else
  c10::DataPtr allocate(size_t n) const override { return make(n); }
#endif
  c10::DeleterFnPtr raw_deleter() const override { return &release; }

 private:
  static c10::DataPtr make(size_t n) {
    void* p = nullptr;
    TORCH_CHECK(GWT_NEED(gw_standin_malloc)(n, &p) == GW_SUCCESS, "gradwire stand-in allocator: ", last_error());
    return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
  }
  static void release(void* p) { api().gw_standin_free(p); }
};

void use_standin_for_cpu_tensors() {
  static auto* alloc = new StandInCpuAllocator();  // never destroyed: tensors outlive everything
  GWT_NEED(gw_standin_malloc);
  GWT_NEED(gw_standin_free);
  c10::SetCPUAllocator(alloc, /*priority=*/100);
}

GradwireBackend* as_gradwire(const c10::intrusive_ptr<BackendBase>& b) {
  auto* g = dynamic_cast<GradwireBackend*>(b.get());
  TORCH_CHECK(g != nullptr, "not a gradwire backend: ", b ? b->getBackendName() : std::string("None"));
  return g;
}

}  // namespace gwtorch

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace py = pybind11;
  using namespace gwtorch;
  m.doc() = "torch.distributed backend 'gradwire' (C++); use gradwire._backend";
  m.attr("TORCH_VERSION_MAJOR") = TORCH_VERSION_MAJOR;
  m.attr("TORCH_VERSION_MINOR") = TORCH_VERSION_MINOR;
  m.def("load_library", &load_library, "dlopen libgradwire at this path (the one gradwire._lib loaded)");
  m.def("library_path", []() { return api().path; });
  m.def(
      "create_backend",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, double timeout_s, const std::string& prefix,
         const std::map<std::string, std::string>& options) -> c10::intrusive_ptr<BackendBase> {
        return c10::make_intrusive<GradwireBackend>(store, rank, size, timeout_s, prefix, options);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout_s"), py::arg("prefix"), py::arg("options"),
      py::call_guard<py::gil_scoped_release>());
  m.def("is_gradwire",
        [](const c10::intrusive_ptr<BackendBase>& b) { return dynamic_cast<GradwireBackend*>(b.get()) != nullptr; });
  m.def("comm_handle",
        [](const c10::intrusive_ptr<BackendBase>& b) { return reinterpret_cast<uintptr_t>(as_gradwire(b)->comm()); });
  m.def("backend_options", [](const c10::intrusive_ptr<BackendBase>& b) { return as_gradwire(b)->options(); });
  m.def("device_path", [](const c10::intrusive_ptr<BackendBase>& b) { return as_gradwire(b)->device_path(); });
  m.def("nccl_enabled", [](const c10::intrusive_ptr<BackendBase>& b) { return as_gradwire(b)->nccl(); });
  m.def(
      "trim", [](const c10::intrusive_ptr<BackendBase>& b) { as_gradwire(b)->trim(); },
      py::call_guard<py::gil_scoped_release>());
  m.def("use_standin_for_cpu_tensors", &use_standin_for_cpu_tensors,
        "every CPU tensor allocated from now on is stand-in device memory (tests only)");
#ifdef GW_TORCH_CUDA
  m.attr("WITH_CUDA") = true;
#else
  m.attr("WITH_CUDA") = false;
#endif
  m.def("timeout_s", [](const c10::intrusive_ptr<BackendBase>& b) { return as_gradwire(b)->timeout_s(); });
  m.def(
      "shutdown_all", [](double grace_s) { live_backends().shutdown_all(Ms(static_cast<int64_t>(grace_s * 1000.0))); },
      py::arg("grace_s"), "finish (or after grace_s abort) what is pending and close every gradwire group",
      py::call_guard<py::gil_scoped_release>());
}
