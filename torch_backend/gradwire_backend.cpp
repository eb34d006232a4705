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

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
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

#include "gradwire/gradwire.h"

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
  X(gw_irecv)
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
  bool wait(Ms timeout) override {
    const bool own = timeout <= Ms(0);
    Ms limit = own ? timeout_ + std::max(Ms(5000), timeout_ / 10) : timeout;
    limit = std::min(limit, Ms(int64_t(1) << 40));
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_for(lock, limit, [&] { return completed_; })) {
      TORCH_CHECK(false, "gradwire ", name_, ": not finished after ", limit.count(), " ms (",
                  own ? "the group's timeout" : "the timeout given to wait", "); it is still pending");
    }
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
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
};

// ---------------------------------------------------------------- completion thread

struct Pending {
  gw_request_t request = nullptr;
  c10::intrusive_ptr<GradwireWork> work;
  std::function<void()> finalize;  // after success: copy staged outputs back
  Tensors keep;                    // staging buffers gradwire reads or writes
  std::vector<size_t> sizes;       // size arrays given to the call
  std::string message;             // the completion callback's error text
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
  const std::map<std::string, std::string>& options() const { return options_; }
  double timeout_s() const { return timeout_.count() / 1000.0; }

  // ---- reductions

  c10::intrusive_ptr<c10d::Work> allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) override {
    const char* name = "all_reduce";
    const at::Tensor& t = single(tensors, name);
    const gw_dtype_t dt = gw_dtype(t.scalar_type(), name);
    const gw_red_op_t op = gw_op(opts.reduceOp, t.scalar_type(), name);
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
    const Tensors& in = single_list(inputs, name);
    check_list(in, out, name, "input");
    const gw_dtype_t dt = gw_dtype(out.scalar_type(), name);
    const gw_red_op_t op = gw_op(opts.reduceOp, out.scalar_type(), name);
    Staging s;
    at::Tensor send = pack(s, in, nullptr);
    at::Tensor recv = s.out(out, false);
    auto start = [=](gw_request_t* req) {
      return GWT_NEED(gw_ireduce_scatter)(comm_, ptr(send), ptr(recv), recv.numel(), dt, op, req);
    };
    return launch(c10d::OpType::REDUCE_SCATTER, "gradwire:reduce_scatter", name, flatten(inputs), outputs, s, start,
                  opts.timeout);
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                      const c10d::ReduceScatterOptions& opts) override {
    const char* name = "reduce_scatter_tensor";
    same_type(in, out, name);
    TORCH_CHECK(in.numel() == out.numel() * size_, "gradwire backend: ", name, ": the input has ", in.numel(),
                " elements, expected world size (", size_, ") x output (", out.numel(), ")");
    const gw_dtype_t dt = gw_dtype(out.scalar_type(), name);
    const gw_red_op_t op = gw_op(opts.reduceOp, out.scalar_type(), name);
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
    Staging s;
    at::Tensor send = s.in(in);
    at::Tensor recv;
    Tensors outs;
    if (rank_ == root) {
      outs = single_list(outputs, name);
      check_list(outs, in, name, "output");
      recv = s.scratch(static_cast<int64_t>(nbytes(in)) * size_, at::kByte);
    } else {
      TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()), "gradwire backend: ", name,
                  ": only the root (rank ", root, ") takes output tensors");
    }
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
    Staging s;
    at::Tensor send;
    Tensors ins;
    if (rank_ == root) {
      ins = single_list(inputs, name);
      check_list(ins, out, name, "input");
      send = pack(s, ins, nullptr);
    } else {
      TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()), "gradwire backend: ", name,
                  ": only the root (rank ", root, ") takes input tensors");
    }
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
  m.def("timeout_s", [](const c10::intrusive_ptr<BackendBase>& b) { return as_gradwire(b)->timeout_s(); });
  m.def(
      "shutdown_all", [](double grace_s) { live_backends().shutdown_all(Ms(static_cast<int64_t>(grace_s * 1000.0))); },
      py::arg("grace_s"), "finish (or after grace_s abort) what is pending and close every gradwire group",
      py::call_guard<py::gil_scoped_release>());
}
