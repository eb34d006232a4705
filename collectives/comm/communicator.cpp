// The communicator: a transport, its scratch memory, and one progress thread that runs the
// collectives in the order they were submitted (ranks must submit the same sequence), so a
// trainer can overlap its backward pass with communication. A blocking host call made while
// nothing is queued or running runs on the calling thread instead (no two thread hand-offs
// per small call). Either way one thread at a time drives the transport (Impl::running).
#include "gradwire/communicator.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "collectives/algorithms/algorithm_table.hpp"
#include "collectives/algorithms/device/device_algorithms.hpp"
#include "collectives/algorithms/device/device_backend.hpp"
#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/checks/call_check.hpp"
#include "collectives/comm/communicator_impl.hpp"
#include "collectives/observability/stats.hpp"
#include "collectives/policy/policy.hpp"
#include "common/log.hpp"
#include "compressors/device_ef_state.hpp"
#include "transport/transport.hpp"

namespace gw {

thread_local const Communicator::Impl* Communicator::Impl::driving = nullptr;

// How often an idle progress thread drives the transport.
constexpr std::chrono::milliseconds kIdleProgress{5};

using namespace comm_detail;
using coll::CallDescriptor;
using coll::CallKind;

Result<std::unique_ptr<Communicator>> Communicator::create(std::unique_ptr<transport::Transport> tp,
                                                           const CommConfig& config) {
  return create(std::move(tp), config, {});
}

Result<std::unique_ptr<Communicator>> Communicator::create(std::unique_ptr<transport::Transport> tp,
                                                           const CommConfig& config,
                                                           const std::vector<int>& node_of_rank) {
  if (tp == nullptr) return invalid_argument("transport is null");
  if (tp->size() < 1 || tp->size() > transport::kMaxRanks) {
    return unsupported("communicators hold 1 to " + std::to_string(transport::kMaxRanks) + " ranks, not " +
                       std::to_string(tp->size()));
  }
  if (!node_of_rank.empty() && node_of_rank.size() != static_cast<size_t>(tp->size())) {
    return invalid_argument("node_of_rank has " + std::to_string(node_of_rank.size()) + " entries for " +
                            std::to_string(tp->size()) + " ranks");
  }
  auto impl = std::make_unique<Impl>();
  impl->topo = node_of_rank.empty() ? coll::Topology::single_node(tp->size(), tp->rank())
                                    : coll::Topology::from_node_of(node_of_rank, tp->rank());
  if (auto* view = dynamic_cast<transport::EpochTransport*>(tp.get())) {
    tp.release();
    impl->tp.reset(view);
  } else {
    std::shared_ptr<transport::Transport> core(std::move(tp));
    const uint32_t epoch = core->epoch();
    impl->tp = std::make_unique<transport::EpochTransport>(std::move(core), epoch, std::vector<int>{});
  }
  impl->config = config;
  impl->counted = std::make_unique<coll::CountingTransport>(*impl->tp, impl->stats);
  impl->timeline = coll::Timeline(coll::Timeline::path_from_env(impl->tp->rank(), impl->tp->size()), impl->tp->rank());
  if (const char* t = std::getenv("GW_TUNE"); t != nullptr && std::strcmp(t, "0") == 0) impl->tune = false;
  if (impl->tune) impl->link_gbps = coll::link_gbps_from_env();
  GW_ASSIGN_OR_RETURN(impl->cost_model, coll::cost_model_from_env());
  if (!config.codec_override.empty()) {
    GW_ASSIGN_OR_RETURN(impl->codec_override, Codec::create(config.codec_override));
  }
  std::unique_ptr<Communicator> comm(new Communicator(std::move(impl)));
  Impl* im = comm->impl_.get();
  Communicator* self = comm.get();
  im->serving = std::make_unique<comm_detail::P2pServingTransport>(*im->counted, [im] { return im->serve_p2p(); });
  im->worker = std::thread([im, self] {
    Impl::driving = im;
    while (true) {
      std::shared_ptr<Work> w;
      {
        std::unique_lock<std::mutex> lock(im->mu);
        // While idle, keep the transport progressing: a peer may still need this rank's
        // answers (UCX connection wire-up, acknowledgements) after this rank has moved on to
        // something else, such as a torch barrier; without them that peer's init times out.
        // Point-to-point messages are posted at once and, while any is in flight, watched in
        // the transport's own wait (woken by its events) rather than every kIdleProgress.
        // While a caller drives (running), it does all of that itself.
        while (im->running || (!im->stopping && im->queue.empty())) {
          if (im->running) {
            // A caller drives; it wakes us when it is done if anything is left to do.
            im->cv.wait_for(lock, kIdleProgress);
            continue;
          }
          if ((!im->p2p_new.empty() || !im->p2p_posted.empty()) && im->p2p_waiters == 0) {
            im->running = true;
            lock.unlock();
            bool moved = im->tp->progress();
            moved = im->serve_p2p() || moved;
            if (!moved && !im->p2p_posted.empty()) im->tp->wait_for_events(transport::Clock::now() + kP2pNap);
            lock.lock();
            im->running = false;
            continue;
          }
          if (im->cv.wait_for(lock, kIdleProgress, [&] {
                return im->running || im->stopping || !im->queue.empty() ||
                       (!im->p2p_new.empty() && im->p2p_waiters == 0);
              })) {
            continue;
          }
          im->running = true;
          lock.unlock();
          while (im->tp->progress()) {}
          lock.lock();
          im->running = false;
        }
        if (im->queue.empty()) {
          lock.unlock();
          im->close_p2p();
          return;
        }
        w = std::move(im->queue.front());
        im->queue.pop_front();
        im->running = true;
      }
      const Status s = im->execute([&] { return w->fn()(*self); });
      im->signal_finished(w->seq);
      w->finish(s);
      im->serve_p2p();
      {
        std::lock_guard<std::mutex> lock(im->mu);
        im->running = false;
      }
      im->cv.notify_all();
    }
  });
  GW_INFO(kInit, "communicator up: rank %d of %d over %s; %s, this rank is local rank %d of node %d", comm->rank(),
          comm->size(), im->tp->name(), im->topo.describe().c_str(), im->topo.local_rank, im->topo.node);
  if (comm->rank() == 0 && im->topo.nnodes > 1 && !im->topo.hierarchical()) {
    GW_WARN(kInit, "topology %s: the hierarchical all-reduce is off (%s); all-reduces run flat",
            im->topo.describe().c_str(), im->topo.why_flat().c_str());
  }
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
  if (const Status s = impl_->timeline.write(); !s.is_ok()) GW_WARN(kColl, "%s", s.message().c_str());
}

int Communicator::rank() const { return impl_->tp->rank(); }
int Communicator::node_count() const { return impl_->topo.nnodes; }
int Communicator::node() const { return impl_->topo.node; }
int Communicator::local_rank() const { return impl_->topo.local_rank; }
int Communicator::local_size() const { return impl_->topo.local_size; }

Algo Communicator::Impl::layout_choice(Algo flat, Algo requested, bool on_device) const {
  const bool named =
      requested == Algo::kHierarchical || (requested == Algo::kAuto && config.algo == Algo::kHierarchical);
  const bool automatic = requested == Algo::kAuto && config.algo == Algo::kAuto;
  if (!named && !automatic) return flat;
  const bool nccl_dense = on_device && coll::dense_algorithm(flat) && nccl_on();
  if (topo.hierarchical() && !nccl_dense) return Algo::kHierarchical;
  if (named && !told_flat.exchange(true)) {
    const std::string why = nccl_dense ? "dense device all-reduces run on NCCL, which is topology-aware itself"
                                       : topo.describe() + ": " + topo.why_flat();
    GW_WARN(kColl, "hierarchical all-reduce asked for, but %s: running %s (flat) instead", why.c_str(),
            algo_name(flat));
  }
  return flat;
}

Algo Communicator::Impl::inter_algo(Algo flat, size_t count, DType dtype, const Codec* codec) const {
  const bool lossy =
      !coll::dense_algorithm(flat) && codec != nullptr && codec->id() != CodecId::kNone && dtype == DType::kFloat32;
  if (!lossy) return Algo::kRing;
  if (config.inter_algo != Algo::kAuto) return config.inter_algo;
  // One rank per node takes part: the flat policy's rules with nodes for ranks.
  const Algo a = coll::choose_allreduce(
      coll::PolicyInput{count, dtype, codec, topo.nnodes, Algo::kAuto, Algo::kAuto, 0, false, &cost_model});
  return coll::dense_algorithm(a) ? Algo::kRing : a;
}
int Communicator::size() const { return impl_->tp->size(); }
// Broken by a call, or, while idle, by what the progress thread heard: a peer's last words (it
// aborted, or its call failed), a peer's death seen by the process watch.
Status Communicator::error() const {
  const Status broken = impl_->broken_status();
  return broken.is_ok() ? impl_->tp->error() : broken;
}

void Communicator::abort(const std::string& why) {
  impl_->break_with(Status(Code::kAborted, "communicator aborted: " + why));
}

Status Communicator::Impl::enter() {
  if (driven_here()) return Status::ok();  // a call's own function calling a collective
  const std::thread::id me = std::this_thread::get_id();
  Status refused;
  {
    std::lock_guard<std::mutex> lock(entry_mu);
    if (depth == 0 || caller == me) {
      caller = me;
      ++depth;
      return Status::ok();
    }
    if (overlap.is_ok()) {
      overlap = invalid_usage(
          "two threads called collectives on one communicator at once: the ranks could pair different calls, so the "
          "communicator is now broken (give each thread its own communicator, or make the calls from one thread at a "
          "time)");
    }
    refused = overlap;
  }
  break_with(refused);
  return refused;
}

Status Communicator::Impl::leave() {
  if (driven_here()) return Status::ok();
  std::lock_guard<std::mutex> lock(entry_mu);
  --depth;
  return overlap;
}

std::shared_ptr<Communicator::Work> Communicator::submit(std::function<Status(Communicator&)> fn, Where where) {
  const Status entered = impl_->enter();
  if (!entered.is_ok()) {
    auto refused = std::make_shared<Work>(nullptr);
    refused->finish(entered);
    return refused;
  }
  auto w = std::make_shared<Work>(std::move(fn));
  if (where == Where::kAnyThread) w->owner = this;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->enqueue_locked(w);
  }
  impl_->cv.notify_all();
  impl_->leave();  // a second thread now fails this request's call through the broken communicator
  return w;
}

bool Communicator::test(Work& work, Status* status) { return work.test(status); }

Status Communicator::wait(Work& work) {
  if (Communicator* owner = work.owner.load(std::memory_order_acquire)) {
    if (work.p2p) {
      owner->impl_->drive_p2p_until(work);
    } else {
      owner->impl_->run_if_next(work, *owner);
    }
  }
  return work.wait();
}

void Communicator::Impl::run_if_next(Work& w, Communicator& self) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (running || stopping || queue.empty() || queue.front().get() != &w) return;
    queue.pop_front();
    running = true;
  }
  const Driving here(*this);
  const Status s = execute([&] { return w.fn()(self); });
  signal_finished(w.seq);
  w.finish(s);
  serve_p2p();
}

void Communicator::Impl::release_driver() {
  bool work_left = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    running = false;
    work_left = !queue.empty() || ((!p2p_new.empty() || !p2p_posted.empty()) && p2p_waiters == 0);
  }
  if (work_left) cv.notify_all();
}

Status Communicator::run(std::function<Status()> fn, bool collective, Where where) {
  Impl& im = *impl_;
  // Already driving (a call's own function calling a collective): run inline.
  if (im.driven_here()) return fn();
  if (collective) GW_RETURN_IF_ERROR(im.enter());
  bool here = false;
  if (where == Where::kAnyThread) {
    std::lock_guard<std::mutex> lock(im.mu);
    here = !im.running && im.queue.empty() && !im.stopping;
    if (here) im.running = true;
  }
  Status s;
  if (here) {
    // Nothing is queued or running: this thread drives, in call order as the queue would.
    const Impl::Driving driver(im);
    s = im.execute(fn);
    im.serve_p2p();
  } else {
    auto w = std::make_shared<Work>([fn = std::move(fn)](Communicator&) { return fn(); });
    {
      std::lock_guard<std::mutex> lock(im.mu);
      im.enqueue_locked(w);
    }
    im.cv.notify_all();
    s = w->wait();
  }
  if (collective) {
    const Status overlapped = im.leave();
    if (s.is_ok() && !overlapped.is_ok()) return overlapped;
  }
  return s;
}

namespace {

// A request for the hierarchical all-reduce leaves the flat policy free.
Algo flat_request(Algo a) { return a == Algo::kHierarchical ? Algo::kAuto : a; }

// Whether the measured policy decides this call (see AllreduceTuner).
bool tunable(bool tune, Algo static_choice, Algo requested, Algo configured, const Codec* codec, int nranks) {
  // Dense calls are not tuned.
  return tune && !coll::dense_algorithm(static_choice) && requested == Algo::kAuto && configured == Algo::kAuto &&
         codec != nullptr && codec->id() != CodecId::kNone && nranks > 1;
}

// The entry points of a flat algorithm the policy chose (never kAuto or a composite; the
// dense ring for anything else, as the dispatch always did). Null: it runs on host buffers only.
coll::HostEntry host_entry(Algo a) {
  const coll::AlgorithmRow* row = coll::find_algorithm(a);
  return row != nullptr && !row->composite ? row->host : coll::find_algorithm(Algo::kRing)->host;
}
coll::DeviceEntry device_entry(Algo a) {
  const coll::AlgorithmRow* row = coll::find_algorithm(a);
  return row != nullptr && !row->composite ? row->device : coll::find_algorithm(Algo::kRing)->device;
}

}  // namespace

Algo Communicator::choose_algo(size_t count, DType dtype, const Codec* codec, Algo requested, bool on_device) const {
  codec = impl_->effective_codec(const_cast<Codec*>(codec), dtype);  // only read here
  const coll::PolicyInput in{count,
                             dtype,
                             codec,
                             size(),
                             flat_request(requested),
                             flat_request(impl_->config.algo),
                             impl_->config.dense_threshold_bytes,
                             on_device,
                             &impl_->cost_model};
  const Algo a = coll::choose_allreduce(in);
  const Algo chosen = impl_->layout_choice(a, requested, on_device);
  if (tunable(impl_->tune, a, requested, impl_->config.algo, codec, size())) {
    const Algo d = impl_->tuner.decided((on_device ? "device|" : "") + coll::AllreduceTuner::key(count, dtype, *codec));
    if (d != Algo::kAuto) return d;
    // Before the tuner's first decision: its seed where GW_LINK_GBPS gave one.
    const coll::AllreduceTuner::Candidates c = coll::allreduce_candidates(in, chosen, on_device, impl_->link_gbps);
    return c.algo[c.seed];
  }
  return chosen;
}

Result<CommStats> Communicator::stats() {
  CommStats out;
  GW_RETURN_IF_ERROR(run(
      [&]() -> Status {
        out = impl_->stats;
        return Status::ok();
      },
      /*collective=*/false));
  return out;
}

Status Communicator::reset_stats() {
  return run(
      [&]() -> Status {
        impl_->stats = CommStats();
        return Status::ok();
      },
      /*collective=*/false);
}

Result<Communicator::AllreduceChoice> Communicator::check_allreduce(const void* send, const void* recv, size_t count,
                                                                    DType dtype, ReduceOp op, Codec* codec,
                                                                    const size_t* ef_count, Algo algo,
                                                                    bool on_device) const {
  if (!collective_dtype_valid(static_cast<int>(dtype))) {
    return invalid_argument("dtype " + std::to_string(static_cast<int>(dtype)) + " is not a gw_dtype_t");
  }
  if (static_cast<int>(op) > static_cast<int>(ReduceOp::kMax)) {
    return invalid_argument("op " + std::to_string(static_cast<int>(op)) + " is not a gw_red_op_t");
  }
  const bool lossy = codec != nullptr && codec->id() != CodecId::kNone;
  if (lossy && op != ReduceOp::kSum && op != ReduceOp::kAvg) {
    return invalid_argument(std::string("a compressed all-reduce sums or averages; op ") + red_op_name(op) +
                            " runs dense only (pass no codec)");
  }
  if (count > 0 && (send == nullptr || recv == nullptr))
    return invalid_argument(send == nullptr ? "sendbuf is null" : "recvbuf is null");
  GW_RETURN_IF_ERROR(check_size("count", count, dtype_size(dtype), dtype_name(dtype)));
  if (ef_count != nullptr && *ef_count != count) {
    return invalid_argument("error-feedback state holds " + std::to_string(*ef_count) + " elements but count is " +
                            std::to_string(count));
  }
  codec = impl_->effective_codec(codec, dtype);
  const coll::PolicyInput in{count,
                             dtype,
                             codec,
                             size(),
                             flat_request(algo),
                             flat_request(impl_->config.algo),
                             impl_->config.dense_threshold_bytes,
                             on_device,
                             &impl_->cost_model,
                             op,
                             ef_count != nullptr};
  const Algo flat = coll::choose_allreduce(in);
  const Algo chosen = impl_->layout_choice(flat, algo, on_device);
  const bool tuned = tunable(impl_->tune, flat, algo, impl_->config.algo, codec, size());
  if (const coll::AlgorithmRow* row = coll::find_algorithm(flat); row == nullptr || !(row->codecs & coll::kNoCodec)) {
    if (codec == nullptr) return invalid_argument(std::string("algorithm ") + algo_name(flat) + " needs a codec");
    if (dtype != DType::kFloat32) {
      return unsupported(std::string("compressed all-reduce takes float32, not ") + dtype_name(dtype));
    }
    const bool sparse = codec->spec().is_sparse();
    if (row != nullptr && codec->id() != CodecId::kNone &&
        !(row->codecs & (sparse ? coll::kSparseCodecs : coll::kValueCodecs))) {
      return invalid_argument(
          std::string("algorithm ") + algo_name(flat) + " takes " +
          (sparse ? "value codecs (qsgd, sign, fp16, bf16)" : "sparse codecs (topk, dgc, randomk)") + ", not " +
          codec_name(codec->id()));
    }
  }
  GW_TRACE(kColl, "allreduce count %zu %s codec %s algo %s", count, dtype_name(dtype),
           codec != nullptr ? codec->spec().to_string().c_str() : "none", algo_name(chosen));
  return AllreduceChoice{codec, chosen, tuned, flat};
}

Status Communicator::allreduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, Codec* codec,
                               ErrorFeedback* ef, Algo algo) {
  const size_t ef_count = ef != nullptr ? ef->count() : 0;
  GW_ASSIGN_OR_RETURN(AllreduceChoice ch, check_allreduce(send, recv, count, dtype, op, codec,
                                                          ef != nullptr ? &ef_count : nullptr, algo, false));
  codec = ch.codec;
  const Algo chosen = ch.chosen;
  const Algo inner = impl_->inter_algo(ch.flat, count, dtype, codec);
  const bool tuned = ch.tuned;
  const auto* s = static_cast<const float*>(send);
  return run([=]() -> Status {
    return impl_->allreduce_planned(
        count, dtype, op, codec, ef, chosen, tuned, false, [&](coll::Context& c, Algo ran, bool flush) -> Status {
          const bool hier_ef = ran == Algo::kHierarchical && !coll::dense_algorithm(inner) && ef != nullptr;
          if (ef != nullptr && (ran == Algo::kCompressedRing || ran == Algo::kScatterReduce ||
                                ran == Algo::kHalvingDoubling || hier_ef)) {
            impl_->efs.rehome_owner_residual(*ef, ran, count, c.rank, c.size);
          }
          if (ef != nullptr && !coll::dense_algorithm(ran) && !hier_ef) impl_->efs.mark_flat_filled(ef);
          switch (ran) {
            case Algo::kHierarchical: {
              const bool flush_ef = hier_ef && !impl_->efs.hier_filled(ef);
              GW_RETURN_IF_ERROR(coll::hierarchical_allreduce(
                  c, impl_->topo,
                  coll::HierarchicalArgs{send, recv, count, dtype, op, codec, inner, hier_ef ? ef : nullptr,
                                         impl_->efs.hier_views(), flush_ef, &impl_->node_shm}));
              if (hier_ef) impl_->efs.mark_hier_filled(ef);
              return Status::ok();
            }
            default:
              if (flush) {
                float* acc = coll::prepare_accumulator(c, s, count, ef, 0);  // residual += send
                GW_RETURN_IF_ERROR(coll::ring_allreduce(c, acc, recv, count, dtype, op));
                if (count > 0) std::memset(acc, 0, count * sizeof(float));
                return Status::ok();
              }
              return host_entry(ran)(c, coll::HostAllreduce{send, recv, count, dtype, op, codec, ef});
          }
        });
  });
}

Status Communicator::Impl::allreduce_planned(size_t count, DType dtype, ReduceOp op, const Codec* codec, const void* ef,
                                             Algo chosen, bool tuned, bool on_device, const AlgoRunner& run_algo) {
  Impl& im = *this;
  Algo ran = chosen;
  coll::AllreduceTuner::Plan plan{chosen, false, false, false};
  std::string key;
  if (tuned) {
    key = (on_device ? "device|" : "") + coll::AllreduceTuner::key(count, dtype, *codec);
    const coll::PolicyInput in{
        count,     dtype,         codec, im.tp->size(), Algo::kAuto, Algo::kAuto, im.config.dense_threshold_bytes,
        on_device, &im.cost_model};
    plan = im.tuner.plan(key, coll::allreduce_candidates(in, chosen, on_device, im.link_gbps));
    ran = plan.algo;
  }
  // A dense call decided by the tuner first sends what a compressed call left in the EF
  // residual, so that no gradient stays behind (trial calls leave it for the next one).
  const bool flush = tuned && coll::dense_algorithm(ran) && !plan.trial && ef != nullptr && im.efs.needs_flush(ef);
  double seconds = 0;
  const Status st = im.collective([&](coll::Context& c) { return run_algo(c, ran, flush); },
                                  allreduce_call(count, dtype, op, codec, ran, on_device), &seconds);
  ++im.stats.allreduces;
  im.stats.last_algo = ran;
  if (static_cast<size_t>(ran) < CommStats::kAlgoSlots) ++im.stats.algo_calls[static_cast<size_t>(ran)];
  if (ef != nullptr) im.efs.after_allreduce(ef, ran, flush);
  if (!st.is_ok() || !tuned) return st;
  if (plan.timed) im.tuner.record(key, ran, seconds);
  if (plan.agree_after) {
    // Every rank reaches this call at the same index of the key's schedule: the exchange has
    // the same size everywhere, and the decision is computed from the same numbers.
    double mine[coll::AllreduceTuner::kExchange];
    im.tuner.local_stats(key, mine);
    std::vector<double> all(coll::AllreduceTuner::kExchange * static_cast<size_t>(im.tp->size()));
    GW_RETURN_IF_ERROR(
        im.collective([&](coll::Context& c) { return coll::allgather(c, mine, all.data(), sizeof mine); },
                      call(CallKind::kTunerAgreement, sizeof mine)));
    const coll::AllreduceTuner::Verdict v = im.tuner.decide(key, all.data(), im.tp->size());
    GW_INFO(kTune, "allreduce %s: %s", key.c_str(), v.describe().c_str());
  }
  return Status::ok();
}

Status Communicator::sparse_allgather(const void* msg, size_t len, void* out, size_t capacity, size_t* lengths) {
  if (msg == nullptr && len > 0) return invalid_argument("msg is null");
  if (out == nullptr && capacity > 0) return invalid_argument("out is null");
  if (lengths == nullptr) return invalid_argument("lengths is null");
  GW_RETURN_IF_ERROR(check_size("len", len, 1, "bytes"));
  return run([=]() -> Status {
    bool fits = true;
    GW_RETURN_IF_ERROR(impl_->collective(
        [&](coll::Context& c) {
          if (impl_->topo.hierarchical()) {
            return coll::hierarchical_sparse_allgather(c, impl_->topo, msg, len, out, capacity, lengths, &fits);
          }
          return coll::sparse_allgather(c, msg, len, out, capacity, lengths, &fits);
        },
        call(CallKind::kSparseAllgather)));
    if (fits) return Status::ok();
    uint64_t total = 0;
    for (int r = 0; r < size(); ++r) total += lengths[r];
    return buffer_too_small("the ranks' messages total " + std::to_string(total) +
                            " bytes, above the output capacity " + std::to_string(capacity) +
                            " (lengths holds each one's length)");
  });
}

Status Communicator::sparse_allgather_dense(const void* msg, size_t len, float* dense, size_t count) {
  if (msg == nullptr && len > 0) return invalid_argument("msg is null");
  if (dense == nullptr && count > 0) return invalid_argument("dense is null");
  GW_RETURN_IF_ERROR(check_size("len", len, 1, "bytes"));
  GW_RETURN_IF_ERROR(check_size("count", count, sizeof(float), "float32"));
  return run([=]() -> Status {
    return impl_->collective(
        [&](coll::Context& c) {
          if (impl_->topo.hierarchical()) {
            return coll::hierarchical_sparse_allgather_dense(c, impl_->topo, msg, len, dense, count);
          }
          return coll::sparse_allgather_dense(c, msg, len, dense, count);
        },
        call(CallKind::kSparseAllgatherDense, count));
  });
}

Status Communicator::allgather(const void* send, void* recv, size_t bytes) {
  GW_RETURN_IF_ERROR(check_size("recvbuf (nranks blocks)", bytes, static_cast<uint64_t>(size()), "bytes per rank"));
  if (bytes > 0 && (send == nullptr || recv == nullptr))
    return invalid_argument(send == nullptr ? "sendbuf is null" : "recvbuf is null");
  return run([=]() -> Status {
    return impl_->collective([&](coll::Context& c) { return coll::allgather(c, send, recv, bytes); },
                             call(CallKind::kAllgather, bytes));
  });
}

Status Communicator::broadcast(void* buf, size_t bytes, int root) {
  if (root < 0 || root >= size()) return invalid_argument("root " + std::to_string(root) + " is out of range");
  GW_RETURN_IF_ERROR(check_size("buf", bytes, 1, "bytes"));
  if (bytes > 0 && buf == nullptr) return invalid_argument("buf is null");
  return run([=]() -> Status {
    return impl_->collective([&](coll::Context& c) { return coll::broadcast(c, buf, bytes, root); },
                             call(CallKind::kBroadcast, bytes, root));
  });
}

Status Communicator::barrier() {
  return run([=]() -> Status {
    return impl_->collective([&](coll::Context& c) { return coll::barrier(c); }, call(CallKind::kBarrier));
  });
}

Result<Communicator::StreamPoint> Communicator::mark_stream(void* stream) {
  GW_ASSIGN_OR_RETURN(coll::DeviceBackend * dev, impl_->device_backend());
  return dev->mark(stream);
}

Status Communicator::allreduce_device(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                                      Codec* codec, DeviceEfState* ef, Algo algo, void* stream) {
  return allreduce_device_at(send, recv, count, dtype, op, codec, ef, algo, DeviceOrder{stream, nullptr});
}

Status Communicator::allgather_device(const void* send, void* recv, size_t bytes, void* stream) {
  return allgather_device_at(send, recv, bytes, DeviceOrder{stream, nullptr});
}

Status Communicator::broadcast_device(void* buf, size_t bytes, int root, void* stream) {
  return broadcast_device_at(buf, bytes, root, DeviceOrder{stream, nullptr});
}

Status Communicator::allreduce_device(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                                      Codec* codec, DeviceEfState* ef, Algo algo, const StreamPoint& after) {
  if (after == nullptr) return invalid_argument("no stream point (mark_stream)");
  return allreduce_device_at(send, recv, count, dtype, op, codec, ef, algo, DeviceOrder{nullptr, after});
}

Status Communicator::allgather_device(const void* send, void* recv, size_t bytes, const StreamPoint& after) {
  if (after == nullptr) return invalid_argument("no stream point (mark_stream)");
  return allgather_device_at(send, recv, bytes, DeviceOrder{nullptr, after});
}

Status Communicator::broadcast_device(void* buf, size_t bytes, int root, const StreamPoint& after) {
  if (after == nullptr) return invalid_argument("no stream point (mark_stream)");
  return broadcast_device_at(buf, bytes, root, DeviceOrder{nullptr, after});
}

Result<Communicator::StreamPoint> Communicator::DeviceOrder::point(coll::DeviceBackend& dev) const {
  if (after != nullptr) return after;
  return dev.mark(stream);
}

Status Communicator::stream_wait(Work& work, void* stream) {
  if (work.seq == 0) {
    return unsupported(
        "only collective calls can be waited for on a stream (point-to-point messages are not queued "
        "in call order)");
  }
  GW_ASSIGN_OR_RETURN(coll::DeviceBackend * dev, impl_->device_backend());
  if (work.test(nullptr)) return Status::ok();
  return dev->stream_wait(stream, work.seq);
}

Status Communicator::trim_device() {
  {
    std::lock_guard<std::mutex> lock(impl_->device_mu);
    if (impl_->device == nullptr) return Status::ok();
  }
  return run(
      [&]() -> Status {
        std::lock_guard<std::mutex> lock(impl_->device_mu);
        return impl_->device->trim();
      },
      /*collective=*/false, Where::kProgressThread);
}

Status Communicator::allreduce_device_at(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                                         Codec* codec, DeviceEfState* ef, Algo algo, const DeviceOrder& order) {
  const size_t ef_count = ef != nullptr ? ef->count() : 0;
  GW_ASSIGN_OR_RETURN(AllreduceChoice ch, check_allreduce(send, recv, count, dtype, op, codec,
                                                          ef != nullptr ? &ef_count : nullptr, algo, true));
  const coll::AlgorithmRow* row = coll::find_algorithm(ch.chosen);
  if (row != nullptr && !(row->memory & coll::kDeviceMemory)) {
    return unsupported(std::string(row->name) + " runs on host buffers only; on device buffers " +
                       algo_name(row->device_counterpart) + " is its counterpart");
  }
  GW_ASSIGN_OR_RETURN(coll::DeviceBackend * dev, impl_->device_backend());
  if (count > 0) {
    GW_RETURN_IF_ERROR(dev->check_buffer(send, "sendbuf"));
    GW_RETURN_IF_ERROR(dev->check_buffer(recv, "recvbuf"));
  }
  GW_ASSIGN_OR_RETURN(StreamPoint after, order.point(*dev));
  codec = ch.codec;
  const Algo inner = impl_->inter_algo(ch.flat, count, dtype, codec);
  const auto* s = static_cast<const float*>(send);
  return run(
      [=]() -> Status {
        GW_RETURN_IF_ERROR(dev->begin(*after));
        return impl_->allreduce_planned(
            count, dtype, op, codec, ef, ch.chosen, ch.tuned, true,
            [&](coll::Context& c, Algo ran, bool flush) -> Status {
              // Error feedback on the inter-node leg only (see the host all-reduce): the first
              // hierarchical call after a flat compressed one sends the whole residual once.
              const bool hier_ef = ran == Algo::kHierarchical && !coll::dense_algorithm(inner) && ef != nullptr;
              if (ef != nullptr && !coll::dense_algorithm(ran) && !hier_ef) impl_->efs.mark_flat_filled(ef);
              return settled(*dev, [&]() -> Status {
                switch (ran) {
                  case Algo::kHierarchical: {
                    const bool flush_ef = hier_ef && !impl_->efs.hier_filled(ef);
                    GW_RETURN_IF_ERROR(coll::device_hierarchical_allreduce(
                        c, *dev, impl_->topo,
                        coll::DeviceHierarchicalArgs{send, recv, count, dtype, op, codec, inner, hier_ef ? ef : nullptr,
                                                     flush_ef}));
                    if (hier_ef) impl_->efs.mark_hier_filled(ef);
                    return Status::ok();
                  }
                  default:
                    if (flush) {
                      float* acc = ef->residual();
                      GW_RETURN_IF_ERROR(dev->add(acc, s, count));  // residual += send
                      GW_RETURN_IF_ERROR(coll::device_dense_allreduce(c, *dev, acc, recv, count, dtype, op));
                      GW_RETURN_IF_ERROR(dev->zero(acc, count * sizeof(float)));
                      return coll::drain(c, *dev);
                    }
                    const coll::DeviceEntry entry = device_entry(ran);
                    if (entry == nullptr)
                      return unsupported(std::string(algo_name(ran)) + " runs on host buffers only");
                    if (ef != nullptr && ran == Algo::kScatterReduce) {
                      GW_RETURN_IF_ERROR(impl_->efs.rehome_device_owner_residual(*ef, *dev, count, c.rank, c.size));
                    }
                    return entry(c, *dev, coll::DeviceAllreduce{send, recv, count, dtype, op, codec, ef});
                }
              });
            });
      },
      /*collective=*/true, Where::kProgressThread);
}

Status Communicator::allgather_device_at(const void* send, void* recv, size_t bytes, const DeviceOrder& order) {
  GW_RETURN_IF_ERROR(check_size("recvbuf (nranks blocks)", bytes, static_cast<uint64_t>(size()), "bytes per rank"));
  if (bytes > 0 && (send == nullptr || recv == nullptr))
    return invalid_argument(send == nullptr ? "sendbuf is null" : "recvbuf is null");
  GW_ASSIGN_OR_RETURN(coll::DeviceBackend * dev, impl_->device_backend());
  if (bytes > 0) {
    GW_RETURN_IF_ERROR(dev->check_buffer(send, "sendbuf"));
    GW_RETURN_IF_ERROR(dev->check_buffer(recv, "recvbuf"));
  }
  GW_ASSIGN_OR_RETURN(StreamPoint after, order.point(*dev));
  return run(
      [=]() -> Status {
        return impl_->device_collective(*dev, *after, call(CallKind::kAllgather, bytes), [&](coll::Context& c) {
          return coll::device_allgather(c, *dev, send, recv, bytes);
        });
      },
      /*collective=*/true, Where::kProgressThread);
}

Status Communicator::broadcast_device_at(void* buf, size_t bytes, int root, const DeviceOrder& order) {
  if (root < 0 || root >= size()) return invalid_argument("root " + std::to_string(root) + " is out of range");
  GW_RETURN_IF_ERROR(check_size("buf", bytes, 1, "bytes"));
  if (bytes > 0 && buf == nullptr) return invalid_argument("buf is null");
  GW_ASSIGN_OR_RETURN(coll::DeviceBackend * dev, impl_->device_backend());
  if (bytes > 0) GW_RETURN_IF_ERROR(dev->check_buffer(buf, "buf"));
  GW_ASSIGN_OR_RETURN(StreamPoint after, order.point(*dev));
  return run(
      [=]() -> Status {
        return impl_->device_collective(*dev, *after, call(CallKind::kBroadcast, bytes, root), [&](coll::Context& c) {
          return coll::device_broadcast(c, *dev, buf, bytes, root);
        });
      },
      /*collective=*/true, Where::kProgressThread);
}

Status Communicator::use_device_backend(std::unique_ptr<coll::DeviceBackend> backend) {
  return run(
      [&]() -> Status {  // after every earlier call, which may still use the old one
        std::lock_guard<std::mutex> lock(impl_->device_mu);
        impl_->device = std::move(backend);
        impl_->nccl = false;
        return Status::ok();
      },
      /*collective=*/false, Where::kProgressThread);
}

Status Communicator::device_ready() { return impl_->device_backend().status(); }

bool Communicator::nccl_enabled() const {
  std::lock_guard<std::mutex> lock(impl_->device_mu);
  return impl_->nccl;
}

Status Communicator::enable_nccl() {
  // Every rank learns every other rank's state before anyone joins NCCL: a rank that cannot
  // join would leave the others waiting in NCCL's init until the timeout.
  auto made = impl_->device_backend();
  const Status local = made.status();
  coll::DeviceBackend* dev = made.is_ok() ? made.value() : nullptr;
  return run(
      [=]() -> Status {
        Impl& im = *impl_;
        const int p = im.tp->size();
        // Rank 0's unique id, or why it has none, to everyone.
        struct IdBlob {
          uint8_t ok;
          uint8_t id[128];
          char why[383];
        } blob{};
        if (im.tp->rank() == 0) {
          Status s = local.is_ok() ? dev->nccl_unique_id(blob.id, sizeof blob.id) : local;
          blob.ok = s.is_ok() ? 1 : 0;
          std::snprintf(blob.why, sizeof blob.why, "%s", s.message().c_str());
        }
        GW_RETURN_IF_ERROR(im.collective([&](coll::Context& c) { return coll::broadcast(c, &blob, sizeof blob, 0); },
                                         call(CallKind::kNcclSetup, sizeof blob, 0)));
        if (blob.ok == 0) return unsupported(std::string("NCCL did not start on rank 0: ") + blob.why);
        auto agree = [&](const Status& mine, const char* stage) -> Status {
          const uint8_t flag = mine.is_ok() ? 1 : 0;
          std::vector<uint8_t> all(static_cast<size_t>(p));
          GW_RETURN_IF_ERROR(im.collective([&](coll::Context& c) { return coll::allgather(c, &flag, all.data(), 1); },
                                           call(CallKind::kNcclSetup, 1)));
          if (!mine.is_ok()) return unsupported(std::string(stage) + " on this rank: " + mine.message());
          for (int r = 0; r < p; ++r) {
            if (all[r] == 0)
              return unsupported(std::string(stage) + " on rank " + std::to_string(r) + " (see its error)");
          }
          return Status::ok();
        };
        GW_RETURN_IF_ERROR(agree(local, "no CUDA device for NCCL"));
        const Status joined = dev->nccl_join(blob.id, sizeof blob.id, p, im.tp->rank(),
                                             transport::Clock::now() + im.config.timeout, [&] { im.tp->progress(); });
        if (joined.code() == Code::kTimeout) return joined;  // a rank stopped mid-join: nothing to agree with
        if (Status s = agree(joined, "NCCL init failed"); !s.is_ok()) {
          dev->nccl_leave();
          return s;
        }
        if (im.topo.hierarchical()) {
          // The hierarchical all-reduce's legs inside a node: one more communicator per node, from
          // its local rank 0's id. Every rank learns the outcome everywhere, so all nodes run
          // those legs alike; without it they go through host memory.
          struct NodeId {
            uint8_t ok;
            uint8_t id[128];
          } mine{};
          if (im.topo.local_rank == 0) mine.ok = dev->nccl_unique_id(mine.id, sizeof mine.id).is_ok() ? 1 : 0;
          std::vector<NodeId> ids(static_cast<size_t>(p));
          GW_RETURN_IF_ERROR(
              im.collective([&](coll::Context& c) { return coll::allgather(c, &mine, ids.data(), sizeof mine); },
                            call(CallKind::kNcclSetup, sizeof mine)));
          const NodeId& leader = ids[static_cast<size_t>(im.topo.members[static_cast<size_t>(im.topo.node)][0])];
          const Status node_joined =
              leader.ok != 0
                  ? dev->node_nccl_join(leader.id, sizeof leader.id, im.topo.local_size, im.topo.local_rank,
                                        transport::Clock::now() + im.config.timeout, [&] { im.tp->progress(); })
                  : unsupported("local rank 0 has no NCCL id");
          if (node_joined.code() == Code::kTimeout) return node_joined;
          if (Status s = agree(node_joined, "NCCL inside the node failed"); !s.is_ok()) {
            dev->node_nccl_leave();
            if (s.code() != Code::kUnsupported) return s;
            GW_WARN(kNccl, "%s: the hierarchical all-reduce's legs inside nodes go through host memory",
                    s.message().c_str());
          }
        }
        std::lock_guard<std::mutex> lock(im.device_mu);
        im.nccl = true;
        GW_INFO(kNccl, "NCCL up on rank %d of %d%s", im.tp->rank(), p,
                dev->node_nccl_ready() ? ", and inside its node" : "");
        return Status::ok();
      },
      /*collective=*/true, Where::kProgressThread);
}

}  // namespace gw
