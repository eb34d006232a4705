// The UCX transport: UCP tag messages over whatever UCX selects (verbs, TCP, shared memory).
//
// Threading. One thread drives the transport (posts, progresses, waits); abort() may come from
// any other thread. Every UCX call is made with drive_mu_ held, so the worker is created in
// UCS_THREAD_MODE_SERIALIZED (UCX takes no locks of its own; we serialise). The driving thread
// holds drive_mu_ only inside isend/irecv/progress and the busy part of wait_for_events: it
// lets go while it sleeps in poll(). abort() records the reason under err_mu_, raises a flag
// and writes an eventfd that the sleeper polls; if it can take drive_mu_ it fails everything
// itself before returning, otherwise (the driver is inside a call) the driver does so before
// that call returns. Either way no op is pending after abort() and the next progress().
//
// Ops. Posting fills the caller's Op; a pending op sits in an intrusive list (Op::prev/next,
// with a sentinel so that unlinking needs no list head). Each UCX request carries a small
// context (request_size) naming its Op once the post has returned; a callback that fires
// inside the posting call (a receive that matched an unexpected message completes there,
// since UCX 1.13 fills recv_info only through the callback) finds the context empty and
// completes the op through user_data instead. To give up on a request (abort, failure), the
// op is detached: the context forgets the Op, the op fails now, and the callback only frees
// the request whenever UCX completes it.
//
// Failure. The first failure (a peer's endpoint error, or abort) is sticky: pending receives
// are cancelled, every endpoint is force-closed (which fails the sends on it), whatever UCX
// still holds is detached, and every later post returns the error. Endpoint errors are
// collected during ucp_worker_progress and judged after it returns.
//
// Epochs (recovery). A failure ends the current epoch, not the transport: recover() (a shrink)
// agrees with the other survivors on who is alive (transport/recovery/agreement.hpp, over
// active messages on endpoints made anew from the addresses connect() kept) and opens the
// next epoch among them, on a data worker of its own (nothing sent in one epoch can reach
// another's). Control messages carry the epoch; one from a later epoch tells a rank that its
// own epoch is over (it is kept for when this rank recovers too). While the agreement runs, a peer's death or silence
// is news for it, not a failure.
//
// Clean shutdown. A peer that simply closes its endpoints looks, from the other side, like a
// dead peer (the connection drops). So a healthy transport being destroyed with nothing
// pending says goodbye first: an active message "bye" to every peer, and it waits (bounded)
// until each one has answered "ack", said bye itself, or failed. A peer that said bye may
// then drop its connection without failing anyone.
#include "transport/ucx/ucx_transport.hpp"

#include <dirent.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "common/log.hpp"
#include "transport/process_watch.hpp"
#include "transport/recovery/agreement.hpp"
#include "transport/ucx/ucx_address.hpp"

namespace gw::transport {
namespace {

// wait_for_events: spin this long on ucp_worker_progress before arming the wakeup fd
// (GW_UCX_SPIN_US overrides it)...
constexpr auto kSpin = std::chrono::microseconds(30);
// ...then sleep at most this long before looking again (much less while sends are pending).
constexpr auto kSleep = std::chrono::milliseconds(3);
constexpr auto kSleepWithSends = std::chrono::microseconds(100);
constexpr int kMaxSleepMs = 3;
// Bounded waits of the destructor and of failure handling.
constexpr auto kByeTimeout = std::chrono::seconds(2);
constexpr auto kCloseTimeout = std::chrono::seconds(1);
// A peer's last words (an abort's reason) get this long to leave before the endpoints close.
constexpr auto kLastWordsTimeout = std::chrono::milliseconds(200);
// A dead peer's process is judged after this grace, so that what it sent before it exited
// normally is still taken (messages already in our shared-memory FIFO).
constexpr auto kDeathGrace = std::chrono::milliseconds(20);
constexpr size_t kMaxAbortText = 512;
constexpr auto kSettleTimeout = std::chrono::milliseconds(300);
constexpr auto kSettleIdle = std::chrono::milliseconds(30);
constexpr auto kFailDrainTimeout = std::chrono::milliseconds(200);
// ucp_worker_progress calls per progress(), so that a stream of events cannot starve the caller.
constexpr int kMaxProgressRounds = 64;
// How often drive() also progresses the control worker (wait_for_events always does).
constexpr auto kCtrlProgressEvery = std::chrono::microseconds(200);

// Control messages (UCP active messages, id kCtrlAmId): a header, no payload.
// The worker is ours alone, so id 0 is free (UCX sizes its handler table by the largest id).
constexpr unsigned kCtrlAmId = 0;
// kAbort carries a payload: the sender's error code (u32) and its reason, so that every rank
// learns why a job stopped, not only that a connection dropped.
// kRecovery carries an agreement message, kJoin the fingerprint (u64) of the members a
// recovering rank agreed on.
enum class Ctrl : uint32_t { kHello = 1, kBye = 2, kAck = 3, kAbort = 4, kRecovery = 5, kJoin = 6 };
constexpr uint32_t kCtrlKinds = 7;
struct CtrlHeader {
  uint32_t kind;
  uint32_t rank;
  uint32_t epoch;
};
// Control headers are kept per epoch in this many slots (see set_headers).
constexpr uint32_t kHeaderSlots = 8;
// Control messages of a later epoch kept for when this rank gets there (a bound against a
// flood from a hostile peer), and the largest payload one may carry.
constexpr size_t kMaxFutureCtrl = 4096;
constexpr size_t kMaxCtrlPayload = 64 * 1024;
// The epoch of a control endpoint's errors: they count in every epoch.
constexpr uint32_t kAnyEpoch = ~uint32_t{0};

class UcxTransportImpl;

// The gradwire header in front of a UCX worker address: "GWUA", version, ProcessIdentity.
constexpr size_t kBlobHeader = 5 + ProcessIdentity::kBytes;

// What each UCX request carries (request_size bytes in front of nothing: UCX gives us the
// space at the pointer it returns). Both fields are null while the request is in UCX's pool.
struct ReqCtx {
  Op* op;
  UcxTransportImpl* self;
};

void request_init(void* request) {
  auto* ctx = static_cast<ReqCtx*>(request);
  ctx->op = nullptr;
  ctx->self = nullptr;
}

struct EpErrorArg {
  UcxTransportImpl* self = nullptr;
  int peer = -1;
  uint32_t epoch = 0;
};

ucp_tag_t make_tag(int source, uint64_t tag) { return (static_cast<uint64_t>(source) << kTagBits) | (tag & kTagMask); }

Status ucs_error(const std::string& what, ucs_status_t s) {
  return Status(Code::kSystem, what + ": " + ucs_status_string(s));
}

Status truncated(int peer) {
  return Status(Code::kRemote, "message truncated: the message from rank " + std::to_string(peer) +
                                   " is longer than the receive buffer");
}

// Status of an op that UCX completed with s, before any sticky error is known. We cancel
// only once failed, so a cancel here is UCX purging an endpoint whose connection failed (an
// op posted to it completes in place so): the peer's failure, not an abort.
Status plain_status(ucs_status_t s, const Op& op) {
  if (s == UCS_ERR_MESSAGE_TRUNCATED) return truncated(op.peer);
  return Status(Code::kRemote,
                std::string(op.is_recv ? "receive from" : "send to") + " rank " + std::to_string(op.peer) +
                    " failed: " + (s == UCS_ERR_CANCELED ? "its connection failed" : ucs_status_string(s)));
}

void finish(Op& op, Status s) {
  op.impl = nullptr;
  const OpState st = s.is_ok() ? OpState::kDone : OpState::kFailed;
  op.status = std::move(s);
  op.state.store(static_cast<int>(st), std::memory_order_release);
}

void unlink(Op& op) {
  op.prev->next = op.next;
  op.next->prev = op.prev;
  op.prev = op.next = nullptr;
}

void free_request_cb(void* request, ucs_status_t, void*) { ucp_request_free(request); }

class UcxTransportImpl final : public UcxTransport {
 public:
  UcxTransportImpl(int rank, int size)
      : rank_(rank),
        size_(size),
        peers_(static_cast<size_t>(size)),
        member_(static_cast<size_t>(size), true),
        dead_(static_cast<size_t>(size), false) {
    ctrl_failed_.assign(static_cast<size_t>(size), false);
    pending_.prev = pending_.next = &pending_;
    ep_args_.emplace_back(2 * static_cast<size_t>(size));  // data endpoints, then control ones
    set_headers(0);
  }
  ~UcxTransportImpl() override { shutdown(); }

  Status init() {
    if (const char* v = std::getenv("GW_UCX_SPIN_US"); v != nullptr && *v != '\0') {
      char* end = nullptr;
      const long long us = std::strtoll(v, &end, 10);
      if (end != nullptr && *end == '\0' && us >= 0 && us <= 1000000) {
        spin_ = std::chrono::microseconds(us);
      } else {
        GW_WARN(kTransport, "ucx: ignoring GW_UCX_SPIN_US=%s (want microseconds in [0, 1000000])", v);
      }
    }
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) return Status(Code::kSystem, std::string("eventfd: ") + std::strerror(errno));

    ucp_config_t* config = nullptr;
    ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
    if (s != UCS_OK) return ucs_error("ucp_config_read", s);
    apply_defaults(config);
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_REQUEST_SIZE | UCP_PARAM_FIELD_REQUEST_INIT |
                        UCP_PARAM_FIELD_MT_WORKERS_SHARED | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS | UCP_PARAM_FIELD_NAME;
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    params.request_size = sizeof(ReqCtx);
    params.request_init = &request_init;
    params.mt_workers_shared = 0;
    params.estimated_num_eps = static_cast<size_t>(size_);
    params.name = "gradwire";
    s = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    if (s != UCS_OK) return ucs_error("ucp_init", s);

    GW_RETURN_IF_ERROR(make_worker(&ctrl_, &ctrl_address_, &ctrl_efd_));
    GW_RETURN_IF_ERROR(make_worker(&worker_, &address_, &efd_));
    ucp_am_handler_param_t ap{};
    ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    ap.id = kCtrlAmId;
    ap.cb = &UcxTransportImpl::on_ctrl;
    ap.arg = this;
    s = ucp_worker_set_am_recv_handler(ctrl_, &ap);
    if (s != UCS_OK) return ucs_error("ucp_worker_set_am_recv_handler", s);

    GW_INFO(kTransport, "ucx: rank %d of %d: workers created (UCX %s, addresses %zu + %zu bytes, UCX_TLS=%s)", rank_,
            size_, ucp_get_version_string(), ctrl_address_.size(), address_.size(),
            getenv_or("UCX_TLS", "all (default)"));
    return Status::ok();
  }

  // A worker of the context, its address and its event fd.
  Status make_worker(ucp_worker_h* worker, std::string* address, int* efd) {
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
    ucs_status_t s = ucp_worker_create(context_, &wp, worker);
    if (s != UCS_OK) return ucs_error("ucp_worker_create", s);
    ucp_worker_attr_t attr{};
    attr.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS;
    s = ucp_worker_query(*worker, &attr);
    if (s != UCS_OK) return ucs_error("ucp_worker_query", s);
    address->assign(reinterpret_cast<const char*>(attr.address), attr.address_length);
    ucp_worker_release_address(*worker, attr.address);
    s = ucp_worker_get_efd(*worker, efd);
    if (s != UCS_OK) return ucs_error("ucp_worker_get_efd", s);
    return Status::ok();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "ucx"; }
  // "GWUA", version 2, this process's identity (process_watch.hpp), the control worker's
  // address (u32 length, bytes), then the data worker's address.
  std::string local_address() const override {
    uint8_t head[kBlobHeader] = {'G', 'W', 'U', 'A', 2};
    ProcessIdentity::self().encode(head + 5);
    const uint32_t n = static_cast<uint32_t>(ctrl_address_.size());
    std::string len(sizeof n, '\0');
    std::memcpy(&len[0], &n, sizeof n);
    return std::string(reinterpret_cast<const char*>(head), sizeof head) + len + ctrl_address_ + address_;
  }

  Status connect(const std::vector<std::string>& blobs, Clock::time_point deadline) override {
    std::lock_guard<std::mutex> lock(drive_mu_);
    if (connected_) return internal_error("ucx transport: connect() called twice");
    if (blobs.size() != static_cast<size_t>(size_)) {
      return invalid_argument("ucx transport: " + std::to_string(blobs.size()) + " addresses for " +
                              std::to_string(size_) + " ranks");
    }
    // Every blob came from a peer: checked in full before UCX sees a byte of it.
    std::vector<ProcessIdentity> ids(static_cast<size_t>(size_));
    std::vector<std::string> ctrl_addresses(static_cast<size_t>(size_));
    std::vector<std::string> addresses(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) {
      const size_t i = static_cast<size_t>(r);
      const std::string& b = blobs[i];
      uint32_t ctrl_len = 0;
      if (b.size() > kBlobHeader + sizeof ctrl_len) std::memcpy(&ctrl_len, b.data() + kBlobHeader, sizeof ctrl_len);
      if (b.size() <= kBlobHeader + sizeof ctrl_len || std::memcmp(b.data(), "GWUA\x02", 5) != 0 || ctrl_len == 0 ||
          ctrl_len >= b.size() - kBlobHeader - sizeof ctrl_len) {
        return Status(Code::kRemote, "ucx transport: rank " + std::to_string(r) + " sent a malformed address (" +
                                         std::to_string(b.size()) + " bytes, not a gradwire UCX address)");
      }
      ids[i] = ProcessIdentity::decode(reinterpret_cast<const uint8_t*>(b.data()) + 5);
      ctrl_addresses[i] = b.substr(kBlobHeader + sizeof ctrl_len, ctrl_len);
      addresses[i] = b.substr(kBlobHeader + sizeof ctrl_len + ctrl_len);
      for (const std::string* a : {&ctrl_addresses[i], &addresses[i]}) {
        if (Status v = validate_ucx_address(a->data(), a->size()); !v.is_ok()) {
          return Status(Code::kRemote,
                        "ucx transport: rank " + std::to_string(r) + " sent a malformed address: " + v.message());
        }
      }
    }
    // Watched from here on, so that a peer dying while endpoints are made or during the
    // handshake fails the init at once, naming it.
    watch_ =
        ProcessWatch::start(ids, rank_, [this](int peer, const std::string& why) { report_peer_death(peer, why); });
    eps_.assign(static_cast<size_t>(size_), nullptr);
    ctrl_eps_.assign(static_cast<size_t>(size_), nullptr);
    addresses_ = addresses;
    ctrl_addresses_ = ctrl_addresses;
    connected_ = true;
    for (int r = 0; r < size_; ++r) {
      const size_t i = static_cast<size_t>(r);
      ucs_status_t s = create_endpoint(r, /*ctrl=*/true);
      if (s == UCS_OK) s = create_endpoint(r, /*ctrl=*/false);
      if (s != UCS_OK) {
        eps_[i] = nullptr;
        ctrl_eps_[i] = nullptr;
        std::string why =
            ids[i].same_host_as(ProcessIdentity::self()) && !ids[i].alive()
                ? " (rank " + std::to_string(r) + ", pid " + std::to_string(ids[i].pid) + " on this host, has exited)"
                : " (the peer died, or its address cannot be reached from here)";
        const Status failed(Code::kRemote, "ucx transport: cannot connect to rank " + std::to_string(r) + ": " +
                                               ucs_status_string(s) + why);
        fail(failed);
        return failed;
      }
    }
    // Wire every endpoint up now: UCX connects lazily, at an endpoint's first message. Each
    // rank says hello to every rank (itself included), waits for everyone's hello, and then
    // flushes its endpoints. Connection problems show here rather than in the first
    // collective, and no wireup is left in flight later, when a failure may tear endpoints
    // down (UCX 1.13 asserts in ucp_worker_destroy when it purges a wireup reply that a late
    // connection request left pending).
    if (Status s = handshake(deadline); !s.is_ok()) {
      fail(s);  // sticky: the destructor then drops the endpoints without a goodbye round
      return s;
    }
    if (log::enabled(log::Level::kInfo)) {
      const int peer = size_ > 1 ? (rank_ + 1) % size_ : rank_;
      GW_INFO(kTransport, "ucx: rank %d connected to %d ranks; lanes to rank %d: %s", rank_, size_, peer,
              describe_lanes(eps_[static_cast<size_t>(peer)]).c_str());
    }
    return Status::ok();
  }

  Status isend(int peer, uint64_t tag, const void* buf, size_t len, Op& op) override {
    std::lock_guard<std::mutex> lock(drive_mu_);
    GW_RETURN_IF_ERROR(prepare_send(peer, op));
    return post_send(peer, tag, buf, len, len, nullptr, op);
  }

  Status isend_with_head(int peer, uint64_t tag, const void* head, size_t head_len, const void* buf, size_t len,
                         Op& op) override {
    std::lock_guard<std::mutex> lock(drive_mu_);
    GW_RETURN_IF_ERROR(prepare_send(peer, op));
    // UCX reads the gather list until the send completes: it lives in the op.
    static_assert(sizeof(op.gather) >= 2 * sizeof(ucp_dt_iov_t), "Op::gather holds a two-piece iov");
    auto* iov = new (op.gather) ucp_dt_iov_t[2];
    iov[0] = {const_cast<void*>(head), head_len};
    iov[1] = {const_cast<void*>(buf), len};
    const ucp_datatype_t dt = ucp_dt_make_iov();
    return post_send(peer, tag, iov, 2, head_len + len, &dt, op);
  }

  Status irecv(int peer, uint64_t tag, void* buf, size_t cap, Op& op) override {
    std::lock_guard<std::mutex> lock(drive_mu_);
    GW_RETURN_IF_ERROR(prepare(peer, op, true));
    return post_recv(peer, tag, buf, cap, nullptr, op);
  }

  Status irecv_head(int peer, uint64_t tag, void* buf, size_t cap, Op& op) override {
    // A generic datatype that claims room for any message and keeps only its first cap bytes
    // (HeadSink); UCX reports the whole length.
    const ucp_datatype_t dt = head_sink_datatype();
    if (dt == 0) return internal_error("ucx transport: could not create the head-sink datatype");
    std::lock_guard<std::mutex> lock(drive_mu_);
    GW_RETURN_IF_ERROR(prepare(peer, op, true));
    static_assert(sizeof(op.gather) >= sizeof(HeadSink), "Op::gather holds a HeadSink");
    auto* sink = new (op.gather) HeadSink{static_cast<uint8_t*>(buf), cap};
    return post_recv(peer, tag, sink, 1, &dt, op);
  }

  bool sends_in_flight() const override { return sends_pending_ > 0; }

  bool progress() override {
    std::lock_guard<std::mutex> lock(drive_mu_);
    return drive();
  }

  void wait_for_events(Clock::time_point deadline) override {
    {
      std::lock_guard<std::mutex> lock(drive_mu_);
      const auto spin_until = Clock::now() + spin_;
      do {
        if (drive()) return;
        // With more ranks than cores the peer this rank waits for may be waiting for this
        // core: give it up between looks (a no-op when nothing else is runnable here).
        sched_yield();
      } while (Clock::now() < spin_until);
      if (abort_flag_.load(std::memory_order_acquire) || ctrl_ == nullptr) return;
      if (progress_workers()) return;  // the control worker too, before sleeping on it
      if (!arm_workers()) return;      // events arrived meanwhile: go and progress them
    }
    // Sleep without drive_mu_, so that abort() from another thread can act at once. UCX
    // signals the fd when something arrives, but not when a blocked send could go on (a full
    // shared-memory FIFO drained by the peer), so with sends pending the nap is short.
    const auto cap = sends_pending_ > 0 ? kSleepWithSends : kSleep;
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) return;
    nap(std::chrono::duration_cast<std::chrono::nanoseconds>(std::min<Clock::duration>(left, cap)));
  }

  void abort(const Status& reason) override {
    const Status why = reason.is_ok() ? Status(Code::kAborted, "transport aborted") : reason;
    {
      std::lock_guard<std::mutex> lock(err_mu_);
      if (abort_reason_.is_ok()) abort_reason_ = why;
    }
    abort_flag_.store(true, std::memory_order_release);
    const uint64_t one = 1;
    if (write(wake_fd_, &one, sizeof(one)) < 0) { /* the flag is enough */
    }
    // If nobody is inside the transport, act now; otherwise the thread inside acts before it
    // returns from its current call.
    std::unique_lock<std::mutex> lock(drive_mu_, std::try_to_lock);
    if (lock.owns_lock()) handle_abort_flag();
  }

  Status error() const override {
    std::lock_guard<std::mutex> lock(err_mu_);
    return error_;
  }

  uint32_t epoch() const override { return epoch_pub_.load(std::memory_order_acquire); }

  void abort_epoch(uint32_t epoch, const Status& reason) override {
    {
      std::lock_guard<std::mutex> lock(err_mu_);
      if (epoch != epoch_pub_.load(std::memory_order_relaxed)) return;  // recover() moves it under err_mu_
    }
    abort(reason);
  }

  Status epoch_error(uint32_t epoch) const override {
    std::lock_guard<std::mutex> lock(err_mu_);
    if (epoch == epoch_pub_.load(std::memory_order_relaxed)) return error_;
    if (epoch < epoch_errors_.size()) {
      return epoch_errors_[epoch].is_ok() ? Status(Code::kRevoked, "epoch " + std::to_string(epoch) + " has ended")
                                          : epoch_errors_[epoch];
    }
    return internal_error("ucx transport: no epoch " + std::to_string(epoch) + " yet");
  }

  Result<std::vector<int>> recover(Clock::duration suspect_after, Clock::time_point deadline) override {
    std::lock_guard<std::mutex> lock(drive_mu_);
    handle_abort_flag();
    if (!connected_ || worker_ == nullptr) return internal_error("ucx transport: recover() before connect()");
    if (recovering_) return internal_error("ucx transport: recover() while recovering");
    if (!failed_) {
      return Status(Code::kInvalidUsage,
                    "ucx transport: recover() while epoch " + std::to_string(epoch_) + " is healthy (revoke it first)");
    }
    const auto t0 = Clock::now();
    open_next_epoch();
    recovering_ = true;
    if (Status made = open_data_worker(); !made.is_ok()) {
      recovering_ = false;
      fail(made);
      return made;
    }
    std::vector<bool> out(static_cast<size_t>(size_));
    for (size_t i = 0; i < out.size(); ++i) out[i] = !member_[i];
    agreement_ = std::make_unique<Agreement>(rank_, size_, epoch_, out, suspect_after, t0);
    replay_future_ctrl();
    send_agreement();
    Result<std::vector<int>> members = agree(deadline);
    if (members.is_ok()) {
      const Status joined = join(*members, suspect_after, deadline);
      if (!joined.is_ok()) members = joined;
    }
    recovering_ = false;
    if (!members.is_ok()) {
      fail(members.status());
      return members;
    }
    GW_INFO(kTransport, "ucx: rank %d: epoch %u up with %zu of %d ranks after %.1f ms", rank_, epoch_, members->size(),
            size_, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    return members;
  }

 private:
  // recover(): ends the failed epoch and makes the next one's slate: every member of the
  // failed one not known to be gone is a candidate. drive_mu_ held.
  void open_next_epoch() {
    {
      std::lock_guard<std::mutex> lock(err_mu_);
      epoch_errors_.resize(epoch_ + 1);
      epoch_errors_[epoch_] = error_;
      ++epoch_;
      epoch_pub_.store(epoch_, std::memory_order_release);
      error_ = Status::ok();
      abort_reason_ = Status::ok();
      abort_flag_.store(false, std::memory_order_release);
    }
    set_headers(epoch_);
    failed_ = false;
    peer_aborts_.clear();
    ep_errors_.clear();
    dropped_.clear();
    recovery_in_.clear();
    later_epoch_from_ = -1;
    // Candidates: the failed epoch's members that are not known gone and can still be reached.
    for (int r = 0; r < size_; ++r) {
      const size_t i = static_cast<size_t>(r);
      peers_[i] = PeerState{};
      member_[i] = member_[i] && !dead_[i] && !ctrl_failed_[i];
      peers_[i].failed = !member_[i];
    }
  }

  // recover(): the data worker of the new epoch. The old one goes with everything in it: a
  // peer killed while writing into its shared-memory FIFO can leave that FIFO stuck for good
  // (UCX's mm transport waits for the slot it reserved), and stale messages die with it.
  // drive_mu_ held.
  Status open_data_worker() {
    close_endpoints(/*force=*/true);
    if (worker_ != nullptr) ucp_worker_destroy(worker_);
    worker_ = nullptr;
    efd_ = -1;
    ep_args_.emplace_back(2 * static_cast<size_t>(size_));
    return make_worker(&worker_, &address_, &efd_);
  }

  // Control messages of the epoch just opened that came early; later ones stay. drive_mu_ held.
  void replay_future_ctrl() {
    std::vector<FutureCtrl> keep;
    for (FutureCtrl& f : future_ctrl_) {
      if (f.h.epoch == epoch_) {
        take_ctrl(f.h, f.payload);
      } else if (f.h.epoch > epoch_) {
        keep.push_back(std::move(f));
      }
    }
    future_ctrl_.swap(keep);
  }

  // While recovering: peer cannot take part (dead, its connection failed, it gave up).
  void gone_while_recovering(int peer, const std::string& why) {
    GW_INFO(kTransport, "ucx: rank %d, recovering epoch %u: rank %d is out (%s)", rank_, epoch_, peer, why.c_str());
    peers_[static_cast<size_t>(peer)].failed = true;
    if (agreement_ != nullptr) agreement_->on_dead(peer, Clock::now());
  }

  // Sends what the agreement has to say. drive_mu_ held.
  void send_agreement() {
    if (agreement_ == nullptr) return;
    for (Agreement::Send& m : agreement_->take_sends()) {
      send_owned(m.peer, Ctrl::kRecovery, std::string(m.bytes.begin(), m.bytes.end()));
    }
  }

  // A control message whose payload the transport owns until UCX is done with it.
  void send_owned(int peer, Ctrl kind, std::string payload) {
    ucp_ep_h ep = ctrl_eps_[static_cast<size_t>(peer)];
    if (ep == nullptr || peers_[static_cast<size_t>(peer)].failed) return;
    auto* owned = new std::string(std::move(payload));
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = [](void* request, ucs_status_t, void* user_data) {
      delete static_cast<std::string*>(user_data);
      ucp_request_free(request);
    };
    p.user_data = owned;
    p.flags = UCP_AM_SEND_FLAG_EAGER;
    void* req = ucp_am_send_nbx(ep, kCtrlAmId, header(kind), sizeof(CtrlHeader), owned->data(), owned->size(), &p);
    GW_TRACE(kTransport, "ucx: rank %d (epoch %u): control %u to rank %d, %zu bytes -> %s", rank_, epoch_,
             static_cast<unsigned>(kind), peer, owned->size(),
             req == nullptr ? "sent" : (UCS_PTR_IS_ERR(req) ? ucs_status_string(UCS_PTR_STATUS(req)) : "pending"));
    if (req == nullptr || UCS_PTR_IS_ERR(req)) delete owned;  // done in place, or failed: no callback comes
  }

  // recover(): runs the agreement until it decides. drive_mu_ held.
  Result<std::vector<int>> agree(Clock::time_point deadline) {
    while (agreement_->outcome() == Agreement::Outcome::kRunning) {
      if (failed_) return sticky();
      if (Clock::now() >= deadline) {
        return Status(Code::kTimeout,
                      "shrink: the survivors did not agree before the deadline (" + agreement_->describe() + ")");
      }
      recovery_round(std::min(deadline, agreement_->next_deadline()));
      agreement_->on_tick(Clock::now());
      send_agreement();
    }
    if (agreement_->outcome() == Agreement::Outcome::kExcluded) {
      std::string group;
      for (int m : agreement_->members()) group += (group.empty() ? "" : ",") + std::to_string(m);
      return Status(Code::kRemote, "shrink: the survivors agreed on ranks [" + group + "] without this rank " +
                                       std::to_string(rank_) +
                                       " (it was silent for longer than the timeout, or a survivor lost its "
                                       "connection to it)");
    }
    return agreement_->members();
  }

  // recover(): the members say to one another which group they agreed on, so that none of them
  // uses the new epoch before every other one is in it with the same group. drive_mu_ held.
  Status join(const std::vector<int>& members, Clock::duration suspect_after, Clock::time_point deadline) {
    uint64_t fp = 1469598103934665603ull;  // FNV-1a over the members
    for (int m : members) {
      for (int b = 0; b < 4; ++b) {
        fp ^= static_cast<uint64_t>((static_cast<uint32_t>(m) >> (8 * b)) & 0xff);
        fp *= 1099511628211ull;
      }
    }
    std::fill(member_.begin(), member_.end(), false);
    for (int m : members) member_[static_cast<size_t>(m)] = true;
    std::string join(sizeof fp, '\0');
    std::memcpy(&join[0], &fp, sizeof fp);
    join += address_;  // the new data worker's
    for (int m : members) {
      if (m != rank_) send_owned(m, Ctrl::kJoin, join);
    }
    const auto until = std::min(deadline, Clock::now() + suspect_after);
    for (;;) {
      int missing = -1;
      for (int m : members) {
        const PeerState& p = peers_[static_cast<size_t>(m)];
        if (m == rank_ || p.joined) {
          if (m != rank_ && p.join_fingerprint != fp) {
            return Status(Code::kRemote, "shrink: rank " + std::to_string(m) +
                                             " agreed on a different group than this rank (a survivor's view "
                                             "changed during the agreement); shrink again");
          }
          continue;
        }
        if (p.failed || dead_[static_cast<size_t>(m)]) {
          return Status(Code::kRemote, "shrink: rank " + std::to_string(m) +
                                           " was agreed on as a survivor but failed before the new communicator "
                                           "was up; shrink again");
        }
        if (missing < 0) missing = m;
      }
      if (missing < 0) return connect_members(members, until);
      if (failed_) return sticky();
      if (Clock::now() >= until) {
        return Status(Code::kTimeout, "shrink: rank " + std::to_string(missing) +
                                          " was agreed on as a survivor but did not join the new communicator in "
                                          "time");
      }
      recovery_round(until);
    }
  }

  // Makes the data endpoints to the members, to the data workers they sent in their joins,
  // and wires them up (as connect()'s handshake does) so that no wireup is left in flight when
  // a later failure tears them down. drive_mu_ held.
  Status connect_members(const std::vector<int>& members, Clock::time_point until) {
    for (int m : members) {
      const size_t i = static_cast<size_t>(m);
      addresses_[i] = m == rank_ ? address_ : peers_[i].join_address;
      if (Status v = validate_ucx_address(addresses_[i].data(), addresses_[i].size()); !v.is_ok()) {
        return Status(Code::kRemote, "shrink: rank " + std::to_string(m) + " sent a malformed address: " + v.message());
      }
      if (const ucs_status_t s = create_endpoint(m, /*ctrl=*/false); s != UCS_OK) {
        eps_[i] = nullptr;
        return ucs_error("shrink: connecting to rank " + std::to_string(m), s);
      }
    }
    std::vector<void*> flushes;
    for (int m : members) {
      ucp_ep_h ep = eps_[static_cast<size_t>(m)];
      if (ep == nullptr) continue;
      ucp_request_param_t p{};
      void* req = ucp_ep_flush_nbx(ep, &p);
      if (req != nullptr && !UCS_PTR_IS_ERR(req)) flushes.push_back(req);
    }
    Status result;
    for (void* req : flushes) {
      while (ucp_request_check_status(req) == UCS_INPROGRESS && Clock::now() < until) recovery_round(until);
      const ucs_status_t s = ucp_request_check_status(req);
      if (result.is_ok() && s != UCS_OK) {
        result = s == UCS_INPROGRESS ? Status(Code::kTimeout, "shrink: wiring up the new endpoints took too long")
                                     : ucs_error("shrink: wiring up the new endpoints", s);
      }
      ucp_request_free(req);
    }
    return result;
  }

  // One round of a recovery wait: progress, news, then a nap (bounded by until and 3 ms) on
  // the worker's events. drive_mu_ held.
  void recovery_round(Clock::time_point until) {
    const bool any = progress_workers();
    after_progress();
    if (any) return;
    const auto left = until - Clock::now();
    if (left <= Clock::duration::zero()) return;
    if (arm_workers()) {
      nap(std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::min<Clock::duration>(left, std::chrono::milliseconds(kMaxSleepMs))));
    }
  }

  struct PeerState {
    bool failed = false;    // its endpoint reported an error
    bool said_bye = false;  // it closed its transport cleanly
    bool acked = false;     // it answered our bye
    bool owe_ack = false;   // it said bye and waits for our answer
    bool hello = false;     // it has connected to us
    bool joined = false;    // recovery: it has said which members it agreed on
    uint64_t join_fingerprint = 0;
    std::string join_address;  // ...and where its new data worker is
  };

  // The control headers of epoch e (UCX may read a header until its send completes, so each
  // epoch's live in their own slot, reused kHeaderSlots epochs later).
  void set_headers(uint32_t e) {
    for (uint32_t k = 0; k < kCtrlKinds; ++k)
      headers_[e % kHeaderSlots][k] = CtrlHeader{k, static_cast<uint32_t>(rank_), e};
  }
  const CtrlHeader* header(Ctrl kind) const { return &headers_[epoch_ % kHeaderSlots][static_cast<uint32_t>(kind)]; }

  // Makes the endpoint to rank r: on the control worker (made once, at connect), or on the
  // current epoch's data worker. drive_mu_ held.
  ucs_status_t create_endpoint(int r, bool ctrl) {
    const size_t i = static_cast<size_t>(r);
    EpErrorArg& arg = ep_args_.back()[ctrl ? static_cast<size_t>(size_) + i : i];
    arg.self = this;
    arg.peer = r;
    arg.epoch = ctrl ? kAnyEpoch : epoch_;
    ucp_ep_params_t ep{};
    ep.field_mask =
        UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>((ctrl ? ctrl_addresses_ : addresses_)[i].data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &UcxTransportImpl::on_ep_error;
    ep.err_handler.arg = &arg;
    return ucp_ep_create(ctrl ? ctrl_ : worker_, &ep, &(ctrl ? ctrl_eps_ : eps_)[i]);
  }

  // Both workers' progress: true if anything happened. The control worker only every
  // kCtrlProgressEvery unless forced: its messages are rare, and an idle worker's progress is
  // not free (over TCP an epoll_wait), while a small collective drives the data worker many
  // times per microsecond-scale call. drive_mu_ held.
  bool progress_workers(bool force_ctrl = true) {
    bool any = false;
    const auto now = Clock::now();
    if (force_ctrl || now - ctrl_progressed_ >= kCtrlProgressEvery) {
      ctrl_progressed_ = now;
      for (int i = 0; i < kMaxProgressRounds && ucp_worker_progress(ctrl_) != 0; ++i) any = true;
    }
    if (worker_ != nullptr) {
      for (int i = 0; i < kMaxProgressRounds && ucp_worker_progress(worker_) != 0; ++i) any = true;
    }
    return any;
  }
  // Arms both workers' event fds: false when events are already waiting. drive_mu_ held.
  bool arm_workers() {
    for (ucp_worker_h w : {ctrl_, worker_}) {
      if (w == nullptr) continue;
      const ucs_status_t s = ucp_worker_arm(w);
      if (s == UCS_ERR_BUSY) return false;
      if (s != UCS_OK) {
        GW_TRACE(kTransport, "ucx: ucp_worker_arm: %s", ucs_status_string(s));
        return false;
      }
    }
    return true;
  }
  // Sleeps until an armed worker or the wake fd has news, at most timeout.
  void nap(std::chrono::nanoseconds timeout) {
    const timespec ts{static_cast<time_t>(timeout.count() / 1000000000),
                      static_cast<long>(timeout.count() % 1000000000)};
    pollfd fds[3] = {{ctrl_efd_, POLLIN, 0}, {efd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    const int n = ppoll(fds, 3, &ts, nullptr);
    if (n > 0 && (fds[2].revents & POLLIN) != 0) {
      uint64_t v = 0;
      if (read(wake_fd_, &v, sizeof(v)) < 0) { /* drained already */
      }
    }
  }

  static const char* getenv_or(const char* name, const char* fallback) {
    const char* v = std::getenv(name);
    return v != nullptr ? v : fallback;
  }

  // Whether UCX_TLS lets UCX use a transport known by one of these names ("all" names every one).
  static bool tls_may_use(std::initializer_list<const char*> names) {
    const char* tls = std::getenv("UCX_TLS");
    if (tls == nullptr || *tls == '\0') return true;
    std::string list(tls);
    const bool exclude = list[0] == '^';
    if (exclude) list.erase(0, 1);
    bool named = false;
    size_t pos = 0;
    while (pos <= list.size()) {
      const size_t comma = std::min(list.find(',', pos), list.size());
      const std::string tl = list.substr(pos, comma - pos);
      if (tl == "all") named = true;
      for (const char* n : names) named = named || tl == n;
      pos = comma + 1;
    }
    return exclude ? !named : named;
  }
  // The posix/sysv shared-memory transports; TCP.
  static bool tls_may_use_mm() { return tls_may_use({"sm", "shm", "mm", "posix", "sysv"}); }
  static bool tls_may_use_tcp() { return tls_may_use({"tcp"}); }
  // Whether the kernel knows an RDMA device (InfiniBand, RoCE, iWARP): UCX may then use verbs.
  static bool rdma_devices_present() {
    DIR* dir = opendir("/sys/class/infiniband");
    if (dir == nullptr) return false;
    bool any = false;
    while (const dirent* e = readdir(dir)) {
      if (e->d_name[0] != '.') {
        any = true;
        break;
      }
    }
    closedir(dir);
    return any;
  }

  // Defaults that differ from UCX's, applied only where the user set no UCX_* variable for
  // them (ucp_config_read has read the environment; ucp_config_modify only fills the rest):
  //  - KEEPALIVE_INTERVAL=1s (UCX: 20s): a dead peer on shared memory is found in ~1-2 s.
  //  - MM_ERROR_HANDLING=y (UCX: n) for the posix/sysv transports: without it they offer no
  //    peer-failure handling, and with UCX_TLS=sm an endpoint in UCP_ERR_HANDLING_MODE_PEER
  //    finds no transport for its messages ("no peer failure handler"). Set only when UCX_TLS
  //    lets UCX use them, since UCX warns about a transport setting that nothing used.
  //  - RNDV_THRESH=1 MiB + 1 KiB (UCX: auto) on a host with no RDMA device
  //    (/sys/class/infiniband empty): the collectives' messages (chunks of GW_CHUNK_BYTES,
  //    1 MiB by default) go eagerly. UCX's rendezvous for TCP and shared memory copies anyway
  //    (there is no zero-copy lane to gain, see MM_FIFO_SIZE), and its request/reply round
  //    trip waits behind the data queued in the reverse direction of a loaded link: on the
  //    emulated 1 Gbit/s links, 4-rank dense all-reduces of 4 MiB took 65 ms with it and 53 ms
  //    without (gloo: 53 ms). Larger messages keep the rendezvous, which bounds what a
  //    receiver that has not posted its receive must buffer (eager data arriving early is
  //    held by UCX). With an RDMA device UCX keeps its zero-copy rendezvous for all sizes.
  //  - MM_FIFO_SIZE=1024 (UCX: 64) for the same transports: a receive FIFO of 1024 8 KiB
  //    elements (8 MiB of shared memory per transport and rank) instead of 512 KiB. With the
  //    peer-failure mode above, UCX 1.13 offers no cma lane, so large messages cross the FIFO
  //    in fragments, and a FIFO smaller than the data in flight (a ring step posts a whole
  //    segment) makes sender and receiver take turns: with more ranks than cores (4 ranks on
  //    2 here, as in a trainer whose cores are busy) every turn waits for the scheduler, and
  //    a 4-rank 16 MiB all-reduce took 220 ms instead of 24 ms (docs/performance.md).
  //  - ZCOPY_THRESH=inf (UCX: auto) when UCX_TLS lets UCX use TCP: eager and active-message
  //    rendezvous data are copied (bcopy) instead of sent from the caller's buffer (am_zcopy).
  //    UCX 1.13's TCP transport completes an am_zcopy twice when the socket send fails because
  //    the peer died (uct_tcp_ep_sendv: the error handling purges the op, which completes it,
  //    then sendv completes it again): an assertion (comp->count > 0) in an assert-enabled UCX
  //    such as Debian's, else a recycled request's counter decremented, after which progress
  //    (ours, or the failure path's drain, or the destructor's) can crash in
  //    uct_tcp_iface_progress. In tools/stress/kill_peer.c, 2-rank all-reduces of 2M-16M
  //    floats over TCP with the peer killed mid-call crashed 29 of 150 survivors with the UCX
  //    default, none with this one. Transports without am_zcopy (shared memory, self) are
  //    unaffected; RDMA transports send eager messages by copy too (their rendezvous is RMA,
  //    which this threshold does not govern).
  //  - TCP_TX_SEG_SIZE=32k (UCX: 8k) with it, under its unprefixed key TX_SEG_SIZE (no other
  //    UCX 1.13 transport has that field): copied data leaves in fragments of this size, one
  //    send() each. 2-rank all-reduces of 4M-16M floats over TCP loopback ran 12-33% faster
  //    than with UCX's zero-copy defaults; with 8k fragments they ran 10-15% slower.
  //  - RESOLVE_REMOTE_EP_ID=y (UCX: n): each endpoint learns its peer's endpoint id when it is
  //    created, so that the wireup request and reply this takes are exchanged (and flushed) in
  //    connect()'s handshake. By default UCX asks at an endpoint's first rendezvous, i.e. inside
  //    the first large collective, and a reply queued behind data to a peer that then dies
  //    stays in the endpoint's pending queue; failing that endpoint (our force-close, or UCX's
  //    own error handling) purges it and UCX 1.13 asserts in ucp_request_send_state_ff ("got
  //    REP message": it expects no wireup request or reply there). Over shared memory, with
  //    the peer killed inside the first collective, 6 of 30 replays of one such run crashed a
  //    survivor with the UCX default, none of 30 with this one.
  static void apply_defaults(ucp_config_t* config) {
    struct Default {
      const char* key;  // for ucp_config_modify
      const char* value;
      const char* env[3];  // the variables by which a user may already have chosen
    };
    static const Default kDefaults[] = {
        {"KEEPALIVE_INTERVAL", "1s", {"UCX_KEEPALIVE_INTERVAL", nullptr, nullptr}},
        {"MM_ERROR_HANDLING", "y", {"UCX_POSIX_ERROR_HANDLING", "UCX_SYSV_ERROR_HANDLING", "UCX_MM_ERROR_HANDLING"}},
        {"MM_FIFO_SIZE", "1024", {"UCX_POSIX_FIFO_SIZE", "UCX_SYSV_FIFO_SIZE", "UCX_MM_FIFO_SIZE"}},
        {"ZCOPY_THRESH", "inf", {"UCX_ZCOPY_THRESH", nullptr, nullptr}},
        {"TX_SEG_SIZE", "32k", {"UCX_TCP_TX_SEG_SIZE", nullptr, nullptr}},
        {"RESOLVE_REMOTE_EP_ID", "y", {"UCX_RESOLVE_REMOTE_EP_ID", nullptr, nullptr}},
        {"RNDV_THRESH", "1049600", {"UCX_RNDV_THRESH", nullptr, nullptr}},
    };
    for (const Default& d : kDefaults) {
      bool user_set = false;
      for (const char* env : d.env) user_set = user_set || (env != nullptr && std::getenv(env) != nullptr);
      if (user_set) continue;
      if (std::strncmp(d.key, "MM_", 3) == 0 && !tls_may_use_mm()) continue;
      const bool tcp_only = std::strcmp(d.key, "ZCOPY_THRESH") == 0 || std::strcmp(d.key, "TX_SEG_SIZE") == 0;
      if (tcp_only && !tls_may_use_tcp()) continue;
      if (std::strcmp(d.key, "RNDV_THRESH") == 0 && rdma_devices_present()) continue;
      const ucs_status_t s = ucp_config_modify(config, d.key, d.value);
      if (s != UCS_OK) GW_TRACE(kTransport, "ucx: cannot default %s=%s: %s", d.key, d.value, ucs_status_string(s));
    }
  }

  // "tcp/lo am am_bw | cma/memory rma_bw" from ucp_ep_print_info, for the log.
  static std::string describe_lanes(ucp_ep_h ep) {
    char* text = nullptr;
    size_t len = 0;
    FILE* f = open_memstream(&text, &len);
    if (f == nullptr) return "?";
    ucp_ep_print_info(ep, f);
    std::fclose(f);
    std::string out;
    std::string all(text != nullptr ? text : "", len);
    std::free(text);
    size_t pos = 0;
    while ((pos = all.find("lane[", pos)) != std::string::npos) {
      const size_t eol = all.find('\n', pos);
      std::string line = all.substr(pos, eol == std::string::npos ? std::string::npos : eol - pos);
      pos = eol == std::string::npos ? all.size() : eol;
      // "lane[0]:  2:tcp/lo.0 md[1]  -> md[1]/tcp/sysdev[255] rma_bw#0 am am_bw#0"
      const size_t colon = line.find(':', line.find(']'));
      if (colon == std::string::npos) continue;
      size_t b = line.find(':', colon + 1);
      if (b == std::string::npos) continue;
      ++b;
      const size_t e = line.find(' ', b);
      std::string tl = line.substr(b, e == std::string::npos ? std::string::npos : e - b);
      std::string roles;
      const size_t arrow = line.find("->");
      if (arrow != std::string::npos) {
        const size_t r = line.find(' ', line.find_first_not_of(' ', arrow + 2));
        if (r != std::string::npos) roles = line.substr(r);
      }
      if (!out.empty()) out += " |";
      out += " " + tl + roles;
    }
    return out.empty() ? "?" : out;
  }

  // connect()'s hello round (see there). drive_mu_ held.
  Status handshake(Clock::time_point until) {
    for (int r = 0; r < size_; ++r) send_ctrl(r, Ctrl::kHello);
    Status result;
    std::vector<std::pair<void*, size_t>> flushes;  // (request, rank)
    bool flushing = false;
    for (;;) {
      while (progress_workers()) {}
      after_progress();
      if (failed_) {
        result = sticky();
        break;
      }
      if (!flushing) {
        int missing = -1;
        for (int r = 0; r < size_ && missing < 0; ++r) {
          if (!peers_[static_cast<size_t>(r)].hello) missing = r;
        }
        if (missing < 0) {
          flushing = true;
          for (size_t k = 0; k < 2 * eps_.size() && result.is_ok(); ++k) {
            const size_t r = k % eps_.size();
            ucp_request_param_t p{};
            void* req = ucp_ep_flush_nbx(k < eps_.size() ? ctrl_eps_[r] : eps_[r], &p);
            if (UCS_PTR_IS_ERR(req)) {
              result = Status(Code::kRemote, "ucx transport: connecting to rank " + std::to_string(r) + ": " +
                                                 ucs_status_string(UCS_PTR_STATUS(req)) +
                                                 " (the peer died or dropped the connection)");
            } else if (req != nullptr) {
              flushes.emplace_back(req, r);
            }
          }
          if (!result.is_ok()) break;
        } else if (Clock::now() >= until) {
          result = Status(Code::kTimeout, "ucx transport: no hello from rank " + std::to_string(missing) +
                                              " before the init's timeout");
          break;
        }
      }
      if (flushing) {
        bool done = true;
        for (const auto& f : flushes) done = done && ucp_request_check_status(f.first) != UCS_INPROGRESS;
        if (done) break;
        if (Clock::now() >= until) {
          result = Status(Code::kTimeout, "ucx transport: connecting took longer than the init's timeout");
          break;
        }
      }
      if (arm_workers()) nap(std::chrono::milliseconds(kMaxSleepMs));
    }
    for (const auto& [req, r] : flushes) {
      const ucs_status_t s = ucp_request_check_status(req);
      // A connection that fails while it is made: the peer died or dropped it.
      if (result.is_ok() && s != UCS_OK && s != UCS_INPROGRESS) {
        result = Status(Code::kRemote, "ucx transport: connecting to rank " + std::to_string(r) + ": " +
                                           ucs_status_string(s) + " (the peer died or dropped the connection)");
      }
      ucp_request_free(req);  // one still in progress is released when it ends
    }
    return result;
  }

  // Checks that an op may be posted and marks it pending. drive_mu_ held.
  Status prepare(int peer, Op& op, bool is_recv) {
    handle_abort_flag();
    if (peer < 0 || peer >= size_) {
      return invalid_argument("peer rank " + std::to_string(peer) + " is not in [0, " + std::to_string(size_) + ")");
    }
    if (failed_) return sticky();
    if (!connected_) return internal_error("ucx transport used before connect()");
    if (recovering_) return internal_error("ucx transport used while it recovers");
    if (!member_[static_cast<size_t>(peer)]) {
      return invalid_argument("rank " + std::to_string(peer) + " is not a member of epoch " + std::to_string(epoch_));
    }
    op.peer = peer;
    op.is_recv = is_recv;
    op.bytes = 0;
    op.status = Status::ok();
    op.impl = nullptr;
    op.prev = op.next = nullptr;
    op.state.store(static_cast<int>(OpState::kPending), std::memory_order_release);
    return Status::ok();
  }

  // prepare() for a send, which also fails at once toward a peer that has said goodbye.
  Status prepare_send(int peer, Op& op) {
    GW_RETURN_IF_ERROR(prepare(peer, op, false));
    if (peers_[static_cast<size_t>(peer)].said_bye) {
      finish(op,
             Status(Code::kRemote, "send to rank " + std::to_string(peer) + ": that rank has closed its transport"));
      return op.status;
    }
    return Status::ok();
  }

  // Posts a prepared send of count items at buffer (bytes in all) in datatype *dt (null:
  // contiguous bytes). drive_mu_ held.
  Status post_send(int peer, uint64_t tag, const void* buffer, size_t count, size_t bytes, const ucp_datatype_t* dt,
                   Op& op) {
    op.bytes = bytes;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = &UcxTransportImpl::on_send;
    p.user_data = &op;
    if (dt != nullptr) {
      p.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
      p.datatype = *dt;
    }
    void* req = ucp_tag_send_nbx(eps_[static_cast<size_t>(peer)], buffer, count, make_tag(rank_, tag), &p);
    GW_TRACE(kTransport, "ucx: isend to %d tag %llu len %zu -> %s", peer,
             static_cast<unsigned long long>(tag & kTagMask), bytes,
             req == nullptr ? "done" : (UCS_PTR_IS_ERR(req) ? "error" : "pending"));
    return adopt(req, op, bytes);
  }

  // Posts a prepared receive of count items at buffer in datatype *dt (null: at most count
  // contiguous bytes). drive_mu_ held.
  Status post_recv(int peer, uint64_t tag, void* buffer, size_t count, const ucp_datatype_t* dt, Op& op) {
    ucp_request_param_t p{};
    // NO_IMM_CMPL: an immediate match still reports its length through the callback (UCX 1.13
    // does not fill recv_info on immediate completion).
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.cb.recv = &UcxTransportImpl::on_recv;
    p.user_data = &op;
    if (dt != nullptr) {
      p.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
      p.datatype = *dt;
    }
    void* req = ucp_tag_recv_nbx(worker_, buffer, count, make_tag(peer, tag), ~ucp_tag_t{0}, &p);
    GW_TRACE(kTransport, "ucx: irecv from %d tag %llu cap %zu%s -> %s", peer,
             static_cast<unsigned long long>(tag & kTagMask), dt == nullptr ? count : size_t{0},
             dt == nullptr ? "" : " (any length)",
             req == nullptr ? "done" : (UCS_PTR_IS_ERR(req) ? "error" : "posted"));
    return adopt(req, op, 0);
  }

  // Triage of what a *_nbx call returned.
  Status adopt(void* req, Op& op, size_t immediate_bytes) {
    if (req == nullptr) {  // completed in place
      op.bytes = immediate_bytes;
      finish(op, Status::ok());
      return Status::ok();
    }
    if (UCS_PTR_IS_ERR(req)) {
      if (!op.finished()) finish(op, plain_status(UCS_PTR_STATUS(req), op));
      return op.status;
    }
    if (op.finished()) {  // the callback already ran inside the call
      ucp_request_free(req);
      return Status::ok();  // the op carries its own result (e.g. truncation)
    }
    auto* ctx = static_cast<ReqCtx*>(req);
    ctx->op = &op;
    ctx->self = this;
    if (!op.is_recv) ++sends_pending_;
    op.impl = req;
    op.next = &pending_;
    op.prev = pending_.prev;
    pending_.prev->next = &op;
    pending_.prev = &op;
    return Status::ok();
  }

  // A UCX completion for request (the op it belongs to, if any, is in its context).
  static void complete(void* request, ucs_status_t s, size_t length, void* user_data) {
    auto* ctx = static_cast<ReqCtx*>(request);
    if (ctx->self == nullptr) {
      // Inside the posting call: the op is user_data and is not linked yet; adopt() frees.
      Op& op = *static_cast<Op*>(user_data);
      if (s == UCS_OK && op.is_recv) op.bytes = length;
      finish(op, s == UCS_OK ? Status::ok() : plain_status(s, op));
      return;
    }
    Op* op = ctx->op;
    UcxTransportImpl* self = ctx->self;
    ctx->op = nullptr;
    ctx->self = nullptr;
    ucp_request_free(request);
    if (op == nullptr) return;  // detached: the op was failed already
    self->forget(*op);
    if (s == UCS_OK) {
      if (op->is_recv) op->bytes = length;
      GW_TRACE(kTransport, "ucx: %s rank %d done, %zu bytes", op->is_recv ? "recv from" : "send to", op->peer,
               op->bytes);
      finish(*op, Status::ok());
    } else {
      finish(*op, self->status_for(s, *op));
    }
  }

  // Takes a pending op off the list.
  void forget(Op& op) {
    unlink(op);
    if (!op.is_recv) --sends_pending_;
  }

  Status status_for(ucs_status_t s, const Op& op) const {
    if (s == UCS_ERR_MESSAGE_TRUNCATED) return truncated(op.peer);
    if (failed_) return sticky();
    return plain_status(s, op);
  }

  static void on_send(void* request, ucs_status_t status, void* user_data) { complete(request, status, 0, user_data); }

  // irecv_head's receive: the first cap bytes of a message of any length.
  struct HeadSink {
    uint8_t* buf;
    size_t cap;
  };
  static void* sink_start_pack(void*, const void*, size_t) { return nullptr; }  // never sent
  static void* sink_start_unpack(void*, void* buffer, size_t) { return buffer; }
  static size_t sink_packed_size(void*) { return size_t{1} << 62; }  // never "truncated"
  static size_t sink_pack(void*, size_t, void*, size_t) { return 0; }
  static ucs_status_t sink_unpack(void* state, size_t offset, const void* src, size_t length) {
    const auto* sink = static_cast<const HeadSink*>(state);
    if (offset < sink->cap) std::memcpy(sink->buf + offset, src, std::min(length, sink->cap - offset));
    return UCS_OK;
  }
  static void sink_finish(void*) {}
  static ucp_datatype_t head_sink_datatype() {
    static const ucp_datatype_t dt = [] {
      static const ucp_generic_dt_ops_t ops{&sink_start_pack, &sink_start_unpack, &sink_packed_size,
                                            &sink_pack,       &sink_unpack,       &sink_finish};
      ucp_datatype_t made = 0;
      return ucp_dt_create_generic(&ops, nullptr, &made) == UCS_OK ? made : ucp_datatype_t{0};
    }();
    return dt;
  }

  static void on_recv(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data) {
    complete(request, status, info != nullptr ? info->length : 0, user_data);
  }

  static void on_ep_error(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* a = static_cast<EpErrorArg*>(arg);
    if (a->epoch == kAnyEpoch || a->epoch == a->self->epoch_) {
      a->self->ep_errors_.push_back({a->peer, status, a->epoch == kAnyEpoch});
    }
  }

  static ucs_status_t on_ctrl(void* arg, const void* header, size_t header_length, void* data, size_t length,
                              const ucp_am_recv_param_t* param) {
    auto* self = static_cast<UcxTransportImpl*>(arg);
    CtrlHeader h{};
    if (header_length != sizeof(h)) return UCS_OK;
    std::memcpy(&h, header, sizeof(h));
    if (h.rank >= static_cast<uint32_t>(self->size_) || h.kind == 0 || h.kind >= kCtrlKinds) return UCS_OK;
    // Untrusted: only an inline payload of bounded size is read.
    const bool inline_data = param != nullptr && (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0;
    std::string payload;
    if (inline_data && data != nullptr)
      payload.assign(static_cast<const char*>(data), std::min(length, kMaxCtrlPayload));
    GW_TRACE(kTransport, "ucx: rank %d (epoch %u): control %u of epoch %u from rank %u, %zu bytes", self->rank_,
             self->epoch_, h.kind, h.epoch, h.rank, payload.size());
    if (h.epoch < self->epoch_) return UCS_OK;  // an ended epoch's
    if (h.epoch > self->epoch_) {
      // The peer has recovered past this epoch: this one is over; its message waits for ours.
      if (self->later_epoch_from_ < 0) self->later_epoch_from_ = static_cast<int>(h.rank);
      if (self->future_ctrl_.size() < kMaxFutureCtrl) self->future_ctrl_.push_back({h, std::move(payload)});
      return UCS_OK;
    }
    self->take_ctrl(h, payload);
    return UCS_OK;
  }

  // A control message of the current epoch. drive_mu_ held.
  void take_ctrl(const CtrlHeader& h, const std::string& payload) {
    PeerState& p = peers_[h.rank];
    const int from = static_cast<int>(h.rank);
    switch (static_cast<Ctrl>(h.kind)) {
      case Ctrl::kHello: p.hello = true; break;
      case Ctrl::kBye:
        GW_INFO(kTransport, "ucx: rank %u closed its transport", h.rank);
        p.said_bye = true;
        dead_[h.rank] = true;  // gone from every later epoch
        p.owe_ack = true;
        break;
      case Ctrl::kAck: p.acked = true; break;
      case Ctrl::kAbort: {
        // Untrusted: the code is mapped, the text bounded and made printable.
        uint32_t code = static_cast<uint32_t>(Code::kRemote);
        std::string text;
        if (payload.size() >= 4) {
          std::memcpy(&code, payload.data(), 4);
          text = payload.substr(4, kMaxAbortText);
          for (char& ch : text) {
            if (static_cast<unsigned char>(ch) < 0x20 || static_cast<unsigned char>(ch) > 0x7e) ch = '?';
          }
        }
        peer_aborts_.push_back({from, code, std::move(text)});
        break;
      }
      case Ctrl::kRecovery: recovery_in_.emplace_back(from, payload); break;
      case Ctrl::kJoin:
        if (payload.size() > sizeof(uint64_t)) {
          std::memcpy(&p.join_fingerprint, payload.data(), sizeof(uint64_t));
          p.join_address = payload.substr(sizeof(uint64_t));
          p.joined = true;
        }
        break;
    }
  }

  // What a rank learns from a peer's abort: the peer's own error where it says something about
  // the job (a mismatched call, a timeout, a dead rank), else that the peer stopped.
  static Status from_peer_abort(int peer, uint32_t code, const std::string& text) {
    Code c = Code::kRemote;
    if (code == static_cast<uint32_t>(Code::kInvalidUsage) || code == static_cast<uint32_t>(Code::kTimeout) ||
        code == static_cast<uint32_t>(Code::kRevoked)) {
      c = static_cast<Code>(code);
    }
    return Status(c,
                  "rank " + std::to_string(peer) + " stopped the job: " + (text.empty() ? "(no reason given)" : text));
  }

  // Tells every peer still reachable why this transport failed, and gives those messages a
  // moment to leave before the endpoints are dropped. drive_mu_ held.
  void send_last_words(const Status& why) {
    if (!connected_ || eps_.empty()) return;
    const std::string text = why.to_string().substr(0, kMaxAbortText);
    last_words_.assign(4 + text.size(), '\0');
    const uint32_t code = static_cast<uint32_t>(why.code());
    std::memcpy(last_words_.data(), &code, 4);
    std::memcpy(last_words_.data() + 4, text.data(), text.size());
    std::vector<void*> reqs;
    for (int r = 0; r < size_; ++r) {
      const size_t i = static_cast<size_t>(r);
      if (r == rank_ || ctrl_eps_[i] == nullptr || !member_[i] || peers_[i].failed || peers_[i].said_bye) continue;
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_AM_SEND_FLAG_EAGER;
      void* req = ucp_am_send_nbx(ctrl_eps_[i], kCtrlAmId, header(Ctrl::kAbort), sizeof(CtrlHeader), last_words_.data(),
                                  last_words_.size(), &p);
      if (req != nullptr && !UCS_PTR_IS_ERR(req)) reqs.push_back(req);
    }
    settle_requests(reqs, Clock::now() + kLastWordsTimeout);
  }

  // Progresses until every request in reqs is done or until passes, then frees them all (one
  // still in flight is released by UCX when it ends, or with the worker). drive_mu_ held.
  void settle_requests(const std::vector<void*>& reqs, Clock::time_point until) {
    for (void* req : reqs) {
      while (ucp_request_check_status(req) == UCS_INPROGRESS && Clock::now() < until) progress_workers();
      ucp_request_free(req);
    }
  }

  // From the process watch's thread: peer's process is gone.
  void report_peer_death(int peer, const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(death_mu_);
      deaths_.push_back({peer, why, Clock::now()});
    }
    deaths_pending_.store(true, std::memory_order_release);
    const uint64_t one = 1;
    if (write(wake_fd_, &one, sizeof(one)) < 0) { /* the flag is enough */
    }
  }

  // Deaths reported at least kDeathGrace ago, and peers' aborts. drive_mu_ held.
  void handle_peer_news() {
    if (!peer_aborts_.empty()) {
      std::vector<PeerAbort> aborts;
      aborts.swap(peer_aborts_);
      for (const PeerAbort& a : aborts) {
        peers_[static_cast<size_t>(a.peer)].failed = true;  // it is dropping its endpoints
        if (closing_) continue;
        if (recovering_) {
          gone_while_recovering(a.peer, "it gave up: " + a.text);
        } else if (member_[static_cast<size_t>(a.peer)]) {
          fail(from_peer_abort(a.peer, a.code, a.text), /*tell_peers=*/false);
        }
      }
    }
    if (!deaths_pending_.load(std::memory_order_acquire)) return;
    std::vector<Death> ripe;
    {
      std::lock_guard<std::mutex> lock(death_mu_);
      const auto now = Clock::now();
      for (auto it = deaths_.begin(); it != deaths_.end();) {
        if (now - it->at >= kDeathGrace) {
          ripe.push_back(std::move(*it));
          it = deaths_.erase(it);
        } else {
          ++it;
        }
      }
      if (deaths_.empty()) deaths_pending_.store(false, std::memory_order_relaxed);
    }
    for (const Death& d : ripe) {
      PeerState& p = peers_[static_cast<size_t>(d.peer)];
      dead_[static_cast<size_t>(d.peer)] = true;
      if (p.said_bye || closing_) continue;
      p.failed = true;
      if (recovering_) {
        gone_while_recovering(d.peer, d.why);
      } else if (member_[static_cast<size_t>(d.peer)]) {
        fail(Status(Code::kRemote, d.why + " while its transport was open (the process died)"));
      }
    }
  }

  // A control message without payload to peer (send_owned carries one).
  void send_ctrl(int peer, Ctrl kind) {
    ucp_ep_h ep = ctrl_eps_[static_cast<size_t>(peer)];
    if (ep == nullptr || peers_[static_cast<size_t>(peer)].failed) return;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_FLAGS;
    p.cb.send = &free_request_cb;
    p.flags = UCP_AM_SEND_FLAG_EAGER;
    // The header lives as long as the worker (UCX 1.13 may read it until the send completes).
    void* req = ucp_am_send_nbx(ep, kCtrlAmId, header(kind), sizeof(CtrlHeader), nullptr, 0, &p);
    if (UCS_PTR_IS_ERR(req))
      GW_TRACE(kTransport, "ucx: control message to rank %d: %s", peer, ucs_status_string(UCS_PTR_STATUS(req)));
  }

  // ucp_worker_progress, then whatever it left for us: endpoint errors, acks, abort.
  // drive_mu_ held.
  bool drive() {
    handle_abort_flag();
    if (ctrl_ == nullptr) return false;
    const bool any = progress_workers(/*force_ctrl=*/false);
    after_progress();
    return any;
  }

  void after_progress() {
    if (!ep_errors_.empty()) handle_ep_errors();
    handle_peer_news();
    if (!dropped_.empty()) judge_dropped();
    if (later_epoch_from_ >= 0 && !recovering_ && !failed_ && !closing_) {
      fail(Status(Code::kRevoked, "rank " + std::to_string(later_epoch_from_) + " has left epoch " +
                                      std::to_string(epoch_) + ": it shrank the communicator, so this one is over"));
    }
    later_epoch_from_ = -1;
    if (agreement_ != nullptr && !recovery_in_.empty()) {
      std::vector<std::pair<int, std::string>> in;
      in.swap(recovery_in_);
      for (const auto& [from, bytes] : in) {
        const size_t rejected = agreement_->rejected();
        agreement_->on_message(from, bytes.data(), bytes.size(), Clock::now());
        if (agreement_->rejected() != rejected) {
          GW_WARN(kTransport, "ucx: rank %d, epoch %u: agreement message from rank %d rejected: %s", rank_, epoch_,
                  from, agreement_->last_rejection().c_str());
        }
      }
      send_agreement();
      // Two coordinators decided (a false suspicion) and the later decision left this rank out.
      if (!recovering_ && !failed_ && !closing_ && agreement_->outcome() == Agreement::Outcome::kExcluded) {
        fail(Status(Code::kRemote, "this rank was expelled from epoch " + std::to_string(epoch_) +
                                       ": the survivors settled on a group without it (" + agreement_->describe() +
                                       ")"));
      }
    }
    recovery_in_.clear();
    if (!failed_ && connected_) {
      for (int r = 0; r < size_; ++r) {
        PeerState& p = peers_[static_cast<size_t>(r)];
        if (!p.owe_ack) continue;
        p.owe_ack = false;
        send_ctrl(r, Ctrl::kAck);
      }
    }
    handle_abort_flag();
  }

  void handle_ep_errors() {
    std::vector<EpError> errors;
    errors.swap(ep_errors_);
    for (const EpError& e : errors) {
      const int peer = e.peer;
      const ucs_status_t status = e.status;
      if (e.ctrl) ctrl_failed_[static_cast<size_t>(peer)] = true;  // that endpoint is done for good
      PeerState& p = peers_[static_cast<size_t>(peer)];
      p.failed = true;
      if (closing_) continue;
      if (recovering_) {
        gone_while_recovering(peer, std::string("its connection failed: ") + ucs_status_string(status));
        continue;
      }
      if (!member_[static_cast<size_t>(peer)]) continue;
      if (p.said_bye) {
        GW_INFO(kTransport, "ucx: connection to rank %d closed (%s) after it said goodbye", peer,
                ucs_status_string(status));
        continue;
      }
      // A peer that failed sends its last words on the control worker and then drops its data
      // endpoints: over two connections, the drop may arrive first. Judged after a grace, so
      // the reason it gave wins.
      dropped_.push_back({peer, status, Clock::now()});
    }
  }

  // Data connections dropped at least kDeathGrace ago whose peer said nothing. drive_mu_ held.
  void judge_dropped() {
    const auto now = Clock::now();
    for (auto it = dropped_.begin(); it != dropped_.end();) {
      if (now - it->at < kDeathGrace) {
        ++it;
        continue;
      }
      const Dropped d = *it;
      it = dropped_.erase(it);
      if (failed_ || closing_ || recovering_ || peers_[static_cast<size_t>(d.peer)].said_bye) continue;
      fail(Status(Code::kRemote, "connection to rank " + std::to_string(d.peer) + " failed: " +
                                     ucs_status_string(d.status) + " (the peer died or dropped the connection)"));
    }
  }

  void handle_abort_flag() {
    if (!abort_flag_.load(std::memory_order_acquire)) return;
    abort_flag_.store(false, std::memory_order_relaxed);
    Status reason;
    {
      std::lock_guard<std::mutex> lock(err_mu_);
      reason = abort_reason_;
    }
    fail(reason);
  }

  Status sticky() const {
    std::lock_guard<std::mutex> lock(err_mu_);
    return error_;
  }

  // Makes s the sticky error (if it is the first), tells the peers (unless the news came from
  // one of them) and fails everything. drive_mu_ held.
  void fail(const Status& s, bool tell_peers = true) {
    {
      std::lock_guard<std::mutex> lock(err_mu_);
      if (!error_.is_ok()) return;
      error_ = s;
    }
    if (s.code() == Code::kAborted) {
      GW_INFO(kTransport, "ucx: rank %d: %s", rank_, s.to_string().c_str());
    } else {
      GW_WARN(kTransport, "ucx: rank %d: %s", rank_, s.to_string().c_str());
    }
    failed_ = true;
    if (tell_peers && worker_ != nullptr) send_last_words(s);
    fail_everything();
  }

  // Cancels receives, force-closes endpoints, and fails whatever UCX does not hand back
  // promptly. drive_mu_ held; not re-entered (the progress calls here do not judge errors).
  // Only the data worker: the control endpoints stay for the last words and for a recovery.
  void fail_everything() {
    if (failing_ || worker_ == nullptr) return;
    failing_ = true;
    // Receives posted on the worker: UCX fails them for no peer, so cancel them (unmatched
    // ones complete at once with UCS_ERR_CANCELED; the callback unlinks only its own op).
    for (Op* op = pending_.next; op != &pending_;) {
      Op* next = op->next;
      if (op->is_recv && op->impl != nullptr) ucp_request_cancel(worker_, op->impl);
      op = next;
    }
    // Sends (and matched rendezvous receives) end when their endpoint goes.
    close_endpoints(/*force=*/true);
    const auto until = Clock::now() + kFailDrainTimeout;
    while (pending_.next != &pending_ && Clock::now() < until) progress_workers();
    const Status err = sticky();
    while (pending_.next != &pending_) {
      Op* op = pending_.next;
      forget(*op);
      auto* ctx = static_cast<ReqCtx*>(op->impl);
      if (ctx != nullptr) ctx->op = nullptr;  // detach: the callback will only free it
      finish(*op, err);
    }
    ep_errors_.clear();
    failing_ = false;
  }

  // Closes every data endpoint, or with ctrl the control ones (force: drop; else flush
  // first), bounded by kCloseTimeout.
  void close_endpoints(bool force, bool ctrl = false) {
    std::vector<void*> reqs;
    std::vector<ucp_ep_h>& eps = ctrl ? ctrl_eps_ : eps_;
    for (size_t r = 0; r < eps.size(); ++r) {
      ucp_ep_h ep = eps[r];
      if (ep == nullptr) continue;
      eps[r] = nullptr;
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = (force || peers_[r].failed) ? UCP_EP_CLOSE_FLAG_FORCE : 0;
      void* req = ucp_ep_close_nbx(ep, &p);
      if (req != nullptr && !UCS_PTR_IS_ERR(req)) reqs.push_back(req);
    }
    settle_requests(reqs, Clock::now() + kCloseTimeout);
  }

  // Says goodbye to every peer and waits (bounded) for each to answer, say goodbye, or fail.
  void say_goodbye() {
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const PeerState& p = peers_[static_cast<size_t>(r)];
      if (!p.said_bye && !p.failed && member_[static_cast<size_t>(r)]) send_ctrl(r, Ctrl::kBye);
    }
    const auto until = Clock::now() + kByeTimeout;
    for (;;) {
      while (progress_workers()) {}
      after_progress();
      if (failed_) return;
      int waiting = -1;
      for (int r = 0; r < size_ && waiting < 0; ++r) {
        const PeerState& p = peers_[static_cast<size_t>(r)];
        if (r != rank_ && member_[static_cast<size_t>(r)] && !p.acked && !p.said_bye && !p.failed) waiting = r;
      }
      if (waiting < 0) return;
      if (Clock::now() >= until) {
        GW_INFO(kTransport, "ucx: rank %d: rank %d did not answer the goodbye in time; closing anyway", rank_, waiting);
        return;
      }
      if (arm_workers()) nap(std::chrono::milliseconds(1));
    }
  }

  // After a failure: lets UCX finish or fail what it still has in flight on its own
  // endpoints (wireup messages on dropped connections), progressing until it has been idle
  // for a while or kSettleTimeout passes.
  void settle() {
    const auto until = Clock::now() + kSettleTimeout;
    auto idle_since = Clock::now();
    while (Clock::now() < until && Clock::now() - idle_since < kSettleIdle) {
      if (progress_workers()) {
        idle_since = Clock::now();
      } else if (arm_workers()) {
        nap(std::chrono::milliseconds(1));
      }
    }
    ep_errors_.clear();
  }

  void shutdown() {
    watch_.reset();  // its thread calls back into this object
    std::lock_guard<std::mutex> lock(drive_mu_);
    if (ctrl_ != nullptr) {
      handle_abort_flag();
      if (!failed_ && pending_.next != &pending_) {
        fail(Status(Code::kAborted, "ucx transport destroyed with operations pending"));
      }
      if (!failed_ && connected_) say_goodbye();
      closing_ = true;
      if (failed_) {
        fail_everything();
        settle();
      } else {
        close_endpoints(/*force=*/false);
      }
      close_endpoints(/*force=*/failed_, /*ctrl=*/true);
      if (worker_ != nullptr) ucp_worker_destroy(worker_);
      worker_ = nullptr;
      ucp_worker_destroy(ctrl_);
      ctrl_ = nullptr;
    }
    if (context_ != nullptr) {
      ucp_cleanup(context_);
      context_ = nullptr;
    }
    if (wake_fd_ >= 0) {
      close(wake_fd_);
      wake_fd_ = -1;
    }
  }

  const int rank_;
  const int size_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h ctrl_ = nullptr;    // control messages (hello, bye, last words, recovery), for good
  ucp_worker_h worker_ = nullptr;  // data (tag messages), one per epoch
  int ctrl_efd_ = -1;
  int efd_ = -1;
  Clock::time_point ctrl_progressed_{};  // the control worker's last progress (drive())
  int wake_fd_ = -1;
  Clock::duration spin_ = kSpin;
  std::string address_;
  std::vector<ucp_ep_h> eps_;       // data, this epoch's
  std::vector<ucp_ep_h> ctrl_eps_;  // control
  std::string ctrl_address_;
  std::vector<std::string> ctrl_addresses_;
  std::vector<bool> ctrl_failed_;  // the control endpoint to that rank reported an error
  // One vector per generation of endpoints, kept to the end: UCX holds pointers into them.
  std::deque<std::vector<EpErrorArg>> ep_args_;
  std::vector<std::string> addresses_;  // the peers' UCX worker addresses, from connect()
  CtrlHeader headers_[kHeaderSlots][kCtrlKinds] = {};
  std::string last_words_;  // the abort payload; UCX may read it until the send completes

  // Driving-thread state (drive_mu_ held).
  std::mutex drive_mu_;
  Op pending_;                // sentinel of the circular list of pending ops
  size_t sends_pending_ = 0;  // how many of them are sends
  std::vector<PeerState> peers_;
  // The current epoch (written under drive_mu_ and err_mu_; on_ctrl and on_ep_error read it
  // under drive_mu_), its members, and the ranks known to be gone for good.
  uint32_t epoch_ = 0;
  std::atomic<uint32_t> epoch_pub_{0};  // epoch_, for epoch() from any thread
  std::vector<bool> member_;
  std::vector<bool> dead_;
  bool recovering_ = false;                               // recover() is agreeing or joining
  std::unique_ptr<Agreement> agreement_;                  // the current epoch's (answers late messages)
  std::vector<std::pair<int, std::string>> recovery_in_;  // agreement messages, collected during progress
  struct FutureCtrl {
    CtrlHeader h;
    std::string payload;
  };
  std::vector<FutureCtrl> future_ctrl_;  // control messages of later epochs
  int later_epoch_from_ = -1;            // a peer that has sent one (this epoch is over)
  struct EpError {
    int peer;
    ucs_status_t status;
    bool ctrl;
  };
  std::vector<EpError> ep_errors_;  // this epoch's (and control ones), collected during progress
  struct Dropped {
    int peer;
    ucs_status_t status;
    Clock::time_point at;
  };
  std::vector<Dropped> dropped_;  // data connections lost, judged after kDeathGrace
  struct PeerAbort {
    int peer;
    uint32_t code;
    std::string text;
  };
  std::vector<PeerAbort> peer_aborts_;  // collected during progress
  std::unique_ptr<ProcessWatch> watch_;
  bool connected_ = false;
  bool failed_ = false;  // error_ is set (mirror readable without err_mu_)
  bool failing_ = false;
  bool closing_ = false;

  // Shared with other threads.
  mutable std::mutex err_mu_;
  Status error_;
  std::vector<Status> epoch_errors_;  // [e]: the first failure of ended epoch e
  Status abort_reason_;
  std::atomic<bool> abort_flag_{false};
  struct Death {
    int peer;
    std::string why;
    Clock::time_point at;
  };
  std::mutex death_mu_;
  std::vector<Death> deaths_;  // from the process watch, under death_mu_
  std::atomic<bool> deaths_pending_{false};
};

}  // namespace

Result<std::unique_ptr<UcxTransport>> UcxTransport::create(int rank, int size) {
  if (size < 1 || size > kMaxRanks) {
    return invalid_argument("ucx transport: size " + std::to_string(size) + " is not in [1, " +
                            std::to_string(kMaxRanks) + "]");
  }
  if (rank < 0 || rank >= size) {
    return invalid_argument("ucx transport: rank " + std::to_string(rank) + " is not in [0, " + std::to_string(size) +
                            ")");
  }
  auto t = std::make_unique<UcxTransportImpl>(rank, size);
  GW_RETURN_IF_ERROR(t->init());
  return std::unique_ptr<UcxTransport>(std::move(t));
}

}  // namespace gw::transport
