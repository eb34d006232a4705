// The communicator: a transport, its scratch memory, and one progress thread that runs the
// collectives in the order they were submitted (ranks must submit the same sequence). The
// calling thread only enqueues and waits, so a trainer can overlap its backward pass with
// communication, and the transport is only ever driven from one thread.
#include "gradwire/communicator.hpp"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "collectives/algorithms.hpp"
#include "collectives/policy.hpp"
#include "transport/log.hpp"
#include "transport/transport.hpp"

namespace gw {

// How often an idle progress thread drives the transport.
constexpr std::chrono::milliseconds kIdleProgress{5};

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
  std::unique_ptr<Codec> codec_override;
  coll::Scratch scratch;
  uint64_t seq = 0;  // progress thread only

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
  void break_with(const Status& s) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!broken.is_ok()) return;
      broken = s;
    }
    GW_WARN("communicator broken: %s", s.to_string().c_str());
    tp->abort(s);
  }
};

Result<std::unique_ptr<Communicator>> Communicator::create(std::unique_ptr<transport::Transport> tp,
                                                           const CommConfig& config) {
  if (tp == nullptr) return invalid_argument("transport is null");
  if (tp->size() > 1024) return unsupported("communicators hold at most 1024 ranks");
  auto impl = std::make_unique<Impl>();
  impl->tp = std::move(tp);
  impl->config = config;
  if (!config.codec_override.empty()) {
    GW_ASSIGN_OR_RETURN(impl->codec_override, Codec::create(config.codec_override));
  }
  std::unique_ptr<Communicator> comm(new Communicator(std::move(impl)));
  Impl* im = comm->impl_.get();
  Communicator* self = comm.get();
  im->worker = std::thread([im, self] {
    while (true) {
      std::shared_ptr<Work> w;
      {
        std::unique_lock<std::mutex> lock(im->mu);
        // While idle, keep the transport progressing: a peer may still need this rank's
        // answers (UCX connection wire-up, acknowledgements) after this rank has moved on to
        // something else, such as a torch barrier; without them that peer's init times out.
        while (!im->cv.wait_for(lock, kIdleProgress, [&] { return im->stopping || !im->queue.empty(); })) {
          lock.unlock();
          while (im->tp->progress()) {
          }
          lock.lock();
        }
        if (im->queue.empty()) return;
        w = std::move(im->queue.front());
        im->queue.pop_front();
      }
      Status s = im->broken_status();
      if (s.is_ok()) {
        try {
          s = w->fn()(*self);
        } catch (const std::bad_alloc&) {
          s = Status(Code::kOutOfMemory, "out of memory in a collective");
        } catch (const std::exception& e) {
          s = internal_error(e.what());
        }
        // A failed collective leaves peers mid-protocol: nothing after it can be trusted.
        if (!s.is_ok() && s.code() != Code::kInvalidArgument && s.code() != Code::kUnsupported &&
            s.code() != Code::kBufferTooSmall) {
          im->break_with(s);
          im->tp->progress();
        }
      }
      w->finish(std::move(s));
    }
  });
  GW_INFO("communicator up: rank %d of %d over %s", comm->rank(), comm->size(), im->tp->name());
  return comm;
}

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Communicator::~Communicator() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->worker.joinable()) impl_->worker.join();
}

int Communicator::rank() const { return impl_->tp->rank(); }
int Communicator::size() const { return impl_->tp->size(); }
Status Communicator::error() const { return impl_->broken_status(); }

void Communicator::abort(const std::string& why) {
  impl_->break_with(Status(Code::kAborted, "communicator aborted: " + why));
}

std::shared_ptr<Communicator::Work> Communicator::submit(std::function<Status(Communicator&)> fn) {
  auto w = std::make_shared<Work>(std::move(fn));
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->queue.push_back(w);
  }
  impl_->cv.notify_all();
  return w;
}

bool Communicator::test(Work& work, Status* status) { return work.test(status); }
Status Communicator::wait(Work& work) { return work.wait(); }

Status Communicator::run(std::function<Status()> fn) {
  // Already on the progress thread (a submitted function calling a collective): run inline.
  if (std::this_thread::get_id() == impl_->worker.get_id()) return fn();
  auto w = submit([fn = std::move(fn)](Communicator&) { return fn(); });
  return w->wait();
}

namespace {

coll::Context make_context(transport::Transport& tp, const CommConfig& cfg, coll::Scratch& scratch, uint64_t seq) {
  return coll::Context{tp, tp.rank(), tp.size(), transport::Clock::now() + cfg.timeout, seq, cfg.chunk_bytes, scratch};
}

}  // namespace

Algo Communicator::choose_algo(size_t count, DType dtype, const Codec* codec, Algo requested) const {
  if (impl_->codec_override != nullptr && dtype == DType::kFloat32) codec = impl_->codec_override.get();
  return coll::choose_allreduce(coll::PolicyInput{count, dtype, codec, size(), requested, impl_->config.algo,
                                                  impl_->config.dense_threshold_bytes});
}

Status Communicator::allreduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                               Codec* codec, ErrorFeedback* ef, Algo algo) {
  if (!dtype_valid(static_cast<int>(dtype))) return invalid_argument("dtype is not a gw_dtype_t");
  if (op != ReduceOp::kSum && op != ReduceOp::kAvg) return invalid_argument("op is not a gw_red_op_t");
  if (count > 0 && (send == nullptr || recv == nullptr)) return invalid_argument(send == nullptr ? "sendbuf is null" : "recvbuf is null");
  if (ef != nullptr && ef->count() != count) {
    return invalid_argument("error-feedback state holds " + std::to_string(ef->count()) +
                            " elements but count is " + std::to_string(count));
  }
  if (impl_->codec_override != nullptr && dtype == DType::kFloat32) codec = impl_->codec_override.get();
  const Algo chosen = choose_algo(count, dtype, codec, algo);
  if (chosen != Algo::kRing) {
    if (codec == nullptr) return invalid_argument(std::string("algorithm ") + algo_name(chosen) + " needs a codec");
    if (dtype != DType::kFloat32) {
      return unsupported(std::string("compressed all-reduce takes float32, not ") + dtype_name(dtype));
    }
  }
  GW_TRACE("allreduce count %zu %s codec %s algo %s", count, dtype_name(dtype),
           codec != nullptr ? codec->spec().to_string().c_str() : "none", algo_name(chosen));
  return run([=]() -> Status {
    Impl& im = *impl_;
    coll::Context c = make_context(*im.tp, im.config, im.scratch, im.seq++);
    const auto* s = static_cast<const float*>(send);
    auto* r = static_cast<float*>(recv);
    switch (chosen) {
      case Algo::kCompressedRing: return coll::compressed_ring_allreduce(c, s, r, count, op, *codec, ef);
      case Algo::kScatterReduce: return coll::scatter_reduce_allreduce(c, s, r, count, op, *codec, ef);
      case Algo::kSparseAllgather: return coll::sparse_allgather_allreduce(c, s, r, count, op, *codec, ef);
      default: return coll::ring_allreduce(c, send, recv, count, dtype, op);
    }
  });
}

Status Communicator::sparse_allgather(const void* msg, size_t len, void* out, size_t capacity, size_t* lengths) {
  if (msg == nullptr && len > 0) return invalid_argument("msg is null");
  if (out == nullptr && capacity > 0) return invalid_argument("out is null");
  if (lengths == nullptr) return invalid_argument("lengths is null");
  return run([=]() -> Status {
    coll::Context c = make_context(*impl_->tp, impl_->config, impl_->scratch, impl_->seq++);
    return coll::sparse_allgather(c, msg, len, out, capacity, lengths);
  });
}

Status Communicator::sparse_allgather_dense(const void* msg, size_t len, float* dense, size_t count) {
  if (msg == nullptr && len > 0) return invalid_argument("msg is null");
  if (dense == nullptr && count > 0) return invalid_argument("dense is null");
  return run([=]() -> Status {
    coll::Context c = make_context(*impl_->tp, impl_->config, impl_->scratch, impl_->seq++);
    return coll::sparse_allgather_dense(c, msg, len, dense, count);
  });
}

Status Communicator::allgather(const void* send, void* recv, size_t bytes) {
  if (bytes > 0 && (send == nullptr || recv == nullptr)) return invalid_argument(send == nullptr ? "sendbuf is null" : "recvbuf is null");
  return run([=]() -> Status {
    coll::Context c = make_context(*impl_->tp, impl_->config, impl_->scratch, impl_->seq++);
    return coll::allgather(c, send, recv, bytes);
  });
}

Status Communicator::broadcast(void* buf, size_t bytes, int root) {
  if (root < 0 || root >= size()) return invalid_argument("root " + std::to_string(root) + " is out of range");
  if (bytes > 0 && buf == nullptr) return invalid_argument("buf is null");
  return run([=]() -> Status {
    coll::Context c = make_context(*impl_->tp, impl_->config, impl_->scratch, impl_->seq++);
    return coll::broadcast(c, buf, bytes, root);
  });
}

Status Communicator::barrier() {
  return run([=]() -> Status {
    coll::Context c = make_context(*impl_->tp, impl_->config, impl_->scratch, impl_->seq++);
    return coll::barrier(c);
  });
}

}  // namespace gw
