// The communicator's private state, shared by the files that implement its calls
// (communicator.cpp: init, the progress thread and all-reduce; the other communicator_*.cpp:
// the remaining collectives and point-to-point messages).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/algorithms/device/device_backend.hpp"
#include "collectives/algorithms/hierarchical/node_shm.hpp"
#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/checks/argument_checks.hpp"
#include "collectives/checks/call_check.hpp"
#include "collectives/checks/call_descriptor.hpp"
#include "collectives/comm/ef_book.hpp"
#include "collectives/comm/topology.hpp"
#include "collectives/common/context.hpp"
#include "collectives/observability/stats.hpp"
#include "collectives/observability/timeline.hpp"
#include "collectives/policy/policy.hpp"
#include "common/log.hpp"
#include "gradwire/communicator.hpp"
#include "transport/epoch_transport.hpp"
#include "transport/transport.hpp"

namespace gw {

namespace comm_detail {

// The longest a thread driving point-to-point messages in flight (the idle progress thread,
// or a waiter) sleeps in the transport, which wakes on its events, before it looks again.
inline constexpr std::chrono::milliseconds kP2pNap{1};

using coll::CallDescriptor;
using coll::CallKind;

inline CallDescriptor call(CallKind kind, uint64_t count = 0, int root = -1) {
  CallDescriptor d;
  d.kind = kind;
  d.count = count;
  d.root = root;
  return d;
}

// An all-reduce as the peers must see it: what runs, on what, with which codec.
inline CallDescriptor allreduce_call(size_t count, DType dtype, ReduceOp op, const Codec* codec, Algo ran,
                                     bool on_device) {
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

  // Sets the result once (later calls are ignored), runs the completion callbacks outside the
  // lock, and only then wakes the waiters: a caller whose wait returned sees its callback done.
  void finish(Status s) {
    owner.store(nullptr, std::memory_order_release);
    std::vector<std::function<void(const Status&)>> run;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (done_ || finishing_) return;
      status_ = std::move(s);
      finishing_ = true;
      run.swap(callbacks_);
    }
    for (;;) {
      for (auto& fn : run) fn(status_);  // status_ no longer changes
      run.clear();
      std::lock_guard<std::mutex> lock(mu_);
      if (callbacks_.empty()) {  // none was added while those ran
        done_ = true;
        done_seen_.store(true, std::memory_order_release);
        cv_.notify_all();
        return;
      }
      run.swap(callbacks_);
    }
  }
  bool test(Status* s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_ && s != nullptr) *s = status_;
    return done_;
  }
  Status wait() {
    // A short spin first: a small call finishes within microseconds, and a thread put to
    // sleep on the condition variable takes longer than that to be woken.
    const auto spin_until = std::chrono::steady_clock::now() + kWaitSpin;
    while (!done_seen_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < spin_until) {
      std::this_thread::yield();
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return status_;
  }
  // False when the work is still pending after timeout.
  bool wait_for(std::chrono::milliseconds timeout, Status* s) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return done_; })) return false;
    *s = status_;
    return true;
  }
  // fn runs once with the result: in finish(), or here at once when the work has finished.
  void on_complete(std::function<void(const Status&)> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!done_) {
        callbacks_.push_back(std::move(fn));
        return;
      }
    }
    fn(status_);
  }
  std::function<Status(Communicator&)>& fn() { return fn_; }
  // The work's number in the queue (Impl::queued; 0: not queued, e.g. point-to-point), which
  // the device backend's completion word reaches when it finishes.
  uint32_t seq = 0;
  // Set for work any thread may run (submit's kAnyThread): a waiter runs it itself when the
  // progress thread has not started it (Impl::run_if_next). Cleared when it finishes, so a
  // request waited on after its communicator is gone never reaches it.
  std::atomic<Communicator*> owner{nullptr};
  bool p2p = false;             // a point-to-point message's (waiters drive the transport for it)
  bool waiter_counted = false;  // its waiter is already in Impl::p2p_waiters (send, recv)

 private:
  static constexpr std::chrono::microseconds kWaitSpin{50};
  std::function<Status(Communicator&)> fn_;
  std::atomic<bool> done_seen_{false};  // done_, read without the lock
  std::mutex mu_;
  std::condition_variable cv_;
  bool finishing_ = false;  // the result is set, callbacks are running
  bool done_ = false;
  Status status_;
  std::vector<std::function<void(const Status&)>> callbacks_;
};

namespace comm_detail {

// A point-to-point message: posted by the progress thread, finished when its op is.
struct P2pMessage {
  bool is_recv = false;
  void* buf = nullptr;  // the caller's (a send's is const)
  size_t bytes = 0;     // a send's length; the exact length a receive expects
  int peer = -1;
  uint32_t tag = 0;
  std::shared_ptr<Communicator::Work> work;
  std::unique_ptr<transport::Op> op;  // on the heap: the transport holds its address
  transport::Clock::time_point deadline;
};

// The transport the collectives see (the counting one): it also serves point-to-point
// messages between its rounds (posting new ones, finishing those done), so a long collective
// holds none of them back. serve is Communicator::Impl::serve_p2p.
class P2pServingTransport final : public transport::ForwardingTransport {
 public:
  P2pServingTransport(transport::Transport& inner, std::function<bool()> serve)
      : ForwardingTransport(inner), serve_(std::move(serve)) {}
  bool progress() override {
    const bool moved = inner_.progress();
    return serve_() || moved;
  }

 private:
  std::function<bool()> serve_;
};

}  // namespace comm_detail

struct Communicator::Impl {
  // The communicator's view of its transport (transport/epoch_transport.hpp): one epoch, over
  // the ranks the communicator holds.
  std::unique_ptr<transport::EpochTransport> tp;
  CommConfig config;
  coll::Topology topo;
  coll::NodeShm node_shm;  // progress thread only
  // Where hierarchical was asked for by name and the layout runs flat: said once.
  mutable std::atomic<bool> told_flat{false};
  // The algorithm an all-reduce runs given the flat policy's choice: kHierarchical where the
  // layout allows it and nothing asked for a flat algorithm by name (on device buffers, not
  // for dense calls once NCCL is up: NCCL's own all-reduce knows the topology).
  Algo layout_choice(Algo flat, Algo requested, bool on_device) const;
  // The inter-node leg's algorithm of a hierarchical all-reduce whose flat choice is flat.
  Algo inter_algo(Algo flat, size_t count, DType dtype, const Codec* codec) const;
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
  coll::CommStats stats;                                      // progress thread only
  std::unique_ptr<coll::CountingTransport> counted;           // tp, counting what collectives send
  std::unique_ptr<comm_detail::P2pServingTransport> serving;  // counted, serving p2p between rounds
  coll::AllreduceTuner tuner;
  coll::CallCheck check;                      // the peers' call descriptors of the running collective
  coll::Timeline timeline{std::string(), 0};  // GW_TIMELINE; set up in create()
  static std::string timeline_args(const CallDescriptor& d, const Status& s, uint64_t sent) {
    std::string a = "\"seq\": " + std::to_string(d.seq) + ", \"count\": " + std::to_string(d.count) +
                    ", \"bytes_sent\": " + std::to_string(sent);
    if (d.dtype != coll::kNoField) a += std::string(", \"dtype\": \"") + dtype_name(static_cast<DType>(d.dtype)) + "\"";
    if (d.op != coll::kNoField) a += std::string(", \"op\": \"") + red_op_name(static_cast<ReduceOp>(d.op)) + "\"";
    if (d.algo != coll::kNoField) a += std::string(", \"algo\": \"") + algo_name(static_cast<Algo>(d.algo)) + "\"";
    if (d.root >= 0) a += ", \"root\": " + std::to_string(d.root);
    if (!d.spec.empty()) a += ", \"codec\": \"" + d.spec + "\"";  // specs hold no quotes or backslashes
    if (!s.is_ok()) a += std::string(", \"error\": \"") + code_name(s.code()) + "\"";
    return a;
  }
  bool tune = true;      // GW_TUNE=0 keeps the static policy
  double link_gbps = 0;  // GW_LINK_GBPS (0: unset): seeds the tuner's first choice
  // GW_COST_MODEL's parameters, else the defaults: the static policy decides with them, so
  // every rank must read the same file (ranks that choose differently fail the call check).
  coll::CostModel cost_model;
  // What the all-reduces know of the EF states (host and device) they were given.
  coll::EfBook efs;  // progress thread only

  // The accelerator of the device collectives: made on first use by a caller's thread, then
  // used by the progress thread only.
  mutable std::mutex device_mu;
  std::unique_ptr<coll::DeviceBackend> device;
  bool nccl = false;  // enable_nccl succeeded, under device_mu
  bool nccl_on() const {
    std::lock_guard<std::mutex> lock(device_mu);
    return nccl;
  }
  Result<coll::DeviceBackend*> device_backend() {
    std::lock_guard<std::mutex> lock(device_mu);
    if (device == nullptr) {
      GW_ASSIGN_OR_RETURN(device, coll::make_cuda_backend());
      device->signal(finished_seq);
    }
    return device.get();
  }
  // Works get their numbers as they are queued (under mu); the progress thread finishes them
  // in that order and signals each one's number to the device backend first, so a caller's
  // stream waiting on it (Communicator::stream_wait) goes on once the work is done.
  uint32_t queued = 0;        // under mu
  uint32_t finished_seq = 0;  // under device_mu
  void signal_finished(uint32_t work_seq) {
    if (work_seq == 0) return;
    std::lock_guard<std::mutex> lock(device_mu);
    finished_seq = work_seq;
    if (device != nullptr) device->signal(work_seq);
  }
  // Queues w (under mu) with the next number.
  void enqueue_locked(std::shared_ptr<Work> w) {
    if (++queued == 0) ++queued;  // 0 means "not queued"
    w->seq = queued;
    queue.push_back(std::move(w));
  }

  // Which user thread is inside a collective call (enter/leave): a second one at the same
  // time breaks the communicator, since its ranks could pair the two threads' calls crosswise.
  std::mutex entry_mu;
  std::thread::id caller;
  int depth = 0;
  Status overlap;  // the refusal, once a second thread came in while one was inside
  Status enter();
  // The refusal if a second thread came in while this call was inside (decided under
  // entry_mu, so the call that was inside fails too, however far it got), else ok.
  Status leave();

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<Work>> queue;
  // A thread drives the transport and runs a work (under mu). Whoever sets it is the driver
  // until it clears it: the progress thread, or a caller running its blocking call itself
  // (Communicator::run). "Progress thread only" below means: the driver only.
  bool running = false;
  // The communicator the calling thread is driving now (nested calls run inline).
  static thread_local const Impl* driving;
  bool driven_here() const { return driving == this; }
  // A waiter's thread: runs w now, as the driver, if w is next in the queue and nothing runs.
  void run_if_next(Work& w, Communicator& self);
  // A waiter's thread: drives the transport and the point-to-point messages until w (one of
  // them) finishes, as long as no collective is queued or running.
  void drive_p2p_until(Work& w);
  // The driver lets go of running; wakes the progress thread if anything is left for it.
  void release_driver();
  // A thread other than the progress thread that has set running, for a scope: marks it as
  // driving (nested calls run inline), and on leaving lets go of running.
  class Driving {
   public:
    explicit Driving(Impl& im) : im_(im), outer_(driving) { driving = &im; }
    ~Driving() {
      driving = outer_;
      im_.release_driver();
    }
    Driving(const Driving&) = delete;
    Driving& operator=(const Driving&) = delete;

   private:
    Impl& im_;
    const Impl* outer_;
  };
  // Runs one work's function as the driver: refuses it on a broken communicator, turns
  // exceptions into errors and breaks the communicator where a collective failed midway.
  template <class F>
  Status execute(F&& fn) {
    Status s = broken_status();
    if (!s.is_ok()) return s;
    collective_failed = false;
    try {
      s = fn();
    } catch (const std::bad_alloc&) {
      s = Status(Code::kOutOfMemory, "out of memory in a collective");
    } catch (const std::exception& e) {
      s = internal_error(e.what());
    }
    // A failed collective leaves peers mid-protocol: nothing after it can be trusted. Argument
    // errors found before any message moved leave every rank where it was.
    const bool argument_error =
        s.code() == Code::kInvalidArgument || s.code() == Code::kUnsupported || s.code() == Code::kBufferTooSmall;
    if (!s.is_ok() && (collective_failed || !argument_error)) {
      break_with(s);
      tp->progress();
    }
    return s;
  }
  // Point-to-point messages not posted yet (any thread adds, under mu), and those posted
  // (progress thread only). Neither waits behind the queue above.
  std::deque<std::unique_ptr<comm_detail::P2pMessage>> p2p_new;
  std::vector<std::unique_ptr<comm_detail::P2pMessage>> p2p_posted;
  bool serving_p2p = false;  // serve_p2p is running (progress thread only): no re-entry
  int p2p_waiters = 0;       // threads in drive_p2p_until (under mu)
  bool stopping = false;
  Status broken;  // sticky, under mu
  std::thread worker;

  Status broken_status() {
    std::lock_guard<std::mutex> lock(mu);
    return broken;
  }
  // Progress thread (communicator_p2p.cpp): posts the new point-to-point messages and finishes
  // the posted ones that are done, failed or past their deadline (the caller progresses the
  // transport). True if anything happened.
  bool serve_p2p();
  // Progress thread: fails every point-to-point message, posted or not, with why (the
  // transport must have been aborted first where any is posted: it owns their buffers).
  void fail_p2p(const Status& why);
  // Progress thread, at the communicator's end: finishes what has finished, then aborts the
  // transport if anything is still posted and fails the rest.
  void close_p2p();

  // Runs one collective with a fresh context (the next sequence number), counting it. Every
  // rank states the call (d) to every other, and the call succeeds only where they all match.
  template <class F>
  Status collective(F&& fn, CallDescriptor d, double* seconds = nullptr) {
    coll::Context c{*serving, tp->rank(),         tp->size(), transport::Clock::now() + config.timeout,
                    seq++,    config.chunk_bytes, scratch};
    c.stats = &stats;
    d.seq = c.seq;
    const coll::Timeline::Active recording(&timeline);
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t sent0 = stats.bytes_sent;
    Status s;
    if (c.size > 1) {
      c.check = &check;
      s = check.start(*tp, d, coll::check_graph(d));
    }
    if (s.is_ok()) s = fn(c);
    if (s.is_ok() && c.check != nullptr) s = check.finish(c.deadline);
    if (!s.is_ok()) collective_failed = true;
    const auto t1 = std::chrono::steady_clock::now();
    if (timeline.enabled())
      timeline.span(coll::call_kind_name(d.kind), "collective", t0, t1, timeline_args(d, s, stats.bytes_sent - sent0));
    const double t = std::chrono::duration<double>(t1 - t0).count();
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
    GW_WARN(kColl, "communicator broken: %s", s.to_string().c_str());
    tp->abort(s);
    std::lock_guard<std::mutex> lock(device_mu);
    if (device != nullptr) device->abort();
  }

  // Progress thread: one device collective, after the work the caller had queued at the mark.
  template <class F>
  Status device_collective(coll::DeviceBackend& dev, const coll::StreamMark& after, CallDescriptor d, F&& fn) {
    GW_RETURN_IF_ERROR(dev.begin(after));
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
