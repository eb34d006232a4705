// The communicator's private state, shared by the files that implement its calls
// (communicator.cpp: init, the progress thread and all-reduce; the other communicator_*.cpp:
// the remaining collectives and point-to-point messages).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>

#include "collectives/algorithms.hpp"
#include "collectives/call_check.hpp"
#include "collectives/call_descriptor.hpp"
#include "collectives/device_backend.hpp"
#include "collectives/policy.hpp"
#include "collectives/stats.hpp"
#include "gradwire/communicator.hpp"
#include "transport/log.hpp"
#include "transport/transport.hpp"

namespace gw {

namespace comm_detail {

using coll::CallDescriptor;
using coll::CallKind;

inline CallDescriptor call(CallKind kind, uint64_t count = 0, int root = -1) {
  CallDescriptor d;
  d.kind = kind;
  d.count = count;
  d.root = root;
  return d;
}

// No buffer is larger than this (2^48 bytes: 256 TiB, more than an x86-64 or arm64 process can
// map). Sizes above it, including those whose byte count would wrap, are refused up front:
// nothing is sent and the communicator stays usable.
inline constexpr uint64_t kMaxBufferBytes = uint64_t{1} << 48;

inline Status check_size(const char* what, uint64_t count, uint64_t elem_size, const char* unit) {
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(count, elem_size, &bytes) || bytes > kMaxBufferBytes) {
    return invalid_argument(std::string(what) + " of " + std::to_string(count) + " " + unit + " is larger than any buffer (at most " +
                            std::to_string(kMaxBufferBytes) + " bytes)");
  }
  return Status::ok();
}

// An all-reduce as the peers must see it: what runs, on what, with which codec.
inline CallDescriptor allreduce_call(size_t count, DType dtype, ReduceOp op, const Codec* codec, Algo ran, bool on_device) {
  CallDescriptor d = call(CallKind::kAllreduce, count);
  d.dtype = static_cast<uint8_t>(dtype);
  d.op = static_cast<uint8_t>(op);
  d.algo = static_cast<uint8_t>(ran);
  d.flags = on_device ? CallDescriptor::kDevice : 0;
  if (codec != nullptr && codec->id() != CodecId::kNone) d.spec = codec->spec().to_string();
  return d;
}

// Runs a device collective; when it fails, returns only after the work it enqueued is done,
// so that nothing writes the caller's buffers (or frees staging in use) after the call.
template <class F>
Status settled(coll::DeviceBackend& dev, F&& run_collective) {
  const Status s = run_collective();
  if (!s.is_ok()) dev.quiesce();
  return s;
}


}  // namespace comm_detail

using coll::CallDescriptor;

class Communicator::Work {
 public:
  explicit Work(std::function<Status(Communicator&)> fn) : fn_(std::move(fn)) {}

  void finish(Status s) {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = std::move(s);
    done_ = true;
    cv_.notify_all();
  }
  bool test(Status* s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_ && s != nullptr) *s = status_;
    return done_;
  }
  Status wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return status_;
  }
  std::function<Status(Communicator&)>& fn() { return fn_; }

 private:
  std::function<Status(Communicator&)> fn_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_;
};

struct Communicator::Impl {
  std::unique_ptr<transport::Transport> tp;
  CommConfig config;
  std::unique_ptr<Codec> codec_override;  // GW_CODEC
  // GW_CODEC replaces the codec of calls that asked for compression (a lossy codec on
  // float32), never of dense ones: a plain all-reduce stays exact whatever the environment.
  Codec* effective_codec(Codec* asked, DType dtype) const {
    if (codec_override == nullptr || asked == nullptr || asked->id() == CodecId::kNone || dtype != DType::kFloat32) {
      return asked;
    }
    return codec_override.get();
  }
  coll::Scratch scratch;
  uint64_t seq = 0;  // progress thread only
  // A collective of the current work item failed midway: its peers may still be in it, so
  // the communicator breaks whatever the error (progress thread only).
  bool collective_failed = false;
  coll::CommStats stats;                             // progress thread only
  std::unique_ptr<coll::CountingTransport> counted;  // tp, counting what collectives send
  coll::AllreduceTuner tuner;
  coll::CallCheck check;  // the peers' call descriptors of the running collective
  bool tune = true;  // GW_TUNE=0 keeps the static policy
  // EF states (host or device) whose residual a compressed call filled and no dense call has
  // flushed yet.
  std::unordered_set<const void*> ef_unflushed;  // progress thread only

  // The accelerator of the device collectives: made on first use by a caller's thread, then
  // used by the progress thread only.
  std::mutex device_mu;
  std::unique_ptr<coll::DeviceBackend> device;
  bool nccl = false;  // enable_nccl succeeded, under device_mu

  Result<coll::DeviceBackend*> device_backend() {
    std::lock_guard<std::mutex> lock(device_mu);
    if (device == nullptr) {
      GW_ASSIGN_OR_RETURN(device, coll::make_cuda_backend());
    }
    return device.get();
  }

  // Which user thread is inside a collective call (enter/leave): a second one at the same
  // time breaks the communicator, since its ranks could pair the two threads' calls crosswise.
  std::mutex entry_mu;
  std::thread::id caller;
  int depth = 0;
  Status enter();
  void leave();

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<Work>> queue;
  bool stopping = false;
  Status broken;  // sticky, under mu
  std::thread worker;

  Status broken_status() {
    std::lock_guard<std::mutex> lock(mu);
    return broken;
  }
  // Runs one collective with a fresh context (the next sequence number), counting it. Every
  // rank states the call (d) to every other, and the call succeeds only where they all match.
  template <class F>
  Status collective(F&& fn, CallDescriptor d, double* seconds = nullptr) {
    coll::Context c{*counted, tp->rank(), tp->size(), transport::Clock::now() + config.timeout, seq++,
                    config.chunk_bytes, scratch};
    c.stats = &stats;
    d.seq = c.seq;
    const auto t0 = std::chrono::steady_clock::now();
    Status s;
    if (c.size > 1) {
      c.check = &check;
      s = check.start(*tp, d);
    }
    if (s.is_ok()) s = fn(c);
    if (s.is_ok() && c.check != nullptr) s = check.finish(c.deadline);
    if (!s.is_ok()) collective_failed = true;
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stats.total_s += t;
    ++stats.collectives;
    if (seconds != nullptr) *seconds = t;
    return s;
  }

  void break_with(const Status& s) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!broken.is_ok()) return;
      broken = s;
    }
    GW_WARN("communicator broken: %s", s.to_string().c_str());
    tp->abort(s);
    std::lock_guard<std::mutex> lock(device_mu);
    if (device != nullptr) device->abort();
  }

  // Progress thread: one device collective, after the work the caller queued on stream.
  template <class F>
  Status device_collective(coll::DeviceBackend& dev, void* stream, CallDescriptor d, F&& fn) {
    GW_RETURN_IF_ERROR(dev.begin(stream));
    d.flags = CallDescriptor::kDevice;
    return collective([&](coll::Context& c) { return comm_detail::settled(dev, [&] { return fn(c); }); }, d);
  }

  using AlgoRunner = std::function<Status(coll::Context&, Algo ran, bool flush)>;
  // Progress thread: one all-reduce of the policy's choice, through the tuner when tuned;
  // run_algo does the work (flush: a dense call that first sends ef's residual).
  // on_device: the call is on device buffers, timed apart from host calls (other costs, NCCL).
  Status allreduce_planned(size_t count, DType dtype, ReduceOp op, const Codec* codec, const void* ef, Algo chosen,
                           bool tuned, bool on_device, const AlgoRunner& run_algo);
};

}  // namespace gw
