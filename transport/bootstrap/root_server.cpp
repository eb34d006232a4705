// The rendezvous root and the protocol it speaks.
//
// PROTOCOL (version 2; every integer little-endian; one TCP connection per rank)
//
// The job's 16-byte token T never crosses the wire. Each side proves it holds T with an
// HMAC-SHA256 (hmac_sha256.cpp) over both sides' fresh 32-byte nonces (getrandom), so a
// stranger on the port learns nothing it could use, and an answer captured from one
// connection is worthless on the next. HMAC(k, a | b | ...) below is HMAC-SHA256 keyed with k
// over the concatenation; the labels ("gw-rank", ...) are ASCII without a terminator.
//
// 1. hello, rank -> root, right after connecting (40 bytes):
//   offset  size  field
//        0     4  magic "GWBH"
//        4     2  protocol version (2)
//        6     2  flags (0; ignored)
//        8    32  Nc: the rank's nonce
//   The root reads the version once 8 bytes are in; any other version gets error 3 (a
//   version-1 rank's hello has the same first 8 bytes, so it gets that error too).
//
// 2. challenge, root -> rank: a reply frame (below) of kind 4 whose 32-byte payload is Nr, the
//    root's nonce for this connection.
//
// 3. auth, rank -> root, once it has the challenge:
//        0     4  magic "GWBA"
//        4     4  rank      (0 <= rank < nranks)
//        8     4  nranks    (1 ..= 65536)
//       12     4  blob_len  (<= 65536; more and the connection is closed unread)
//       16  blob  the rank's blob (its transport address)
//   16+blob   32  MAC = HMAC(T, "gw-rank" | Nr | Nc | bytes 0 .. 16+blob_len of this frame)
//   The root checks the MAC (in constant time) before it looks at any field.
//
// 4. proof, root -> rank, right after a valid auth and before anything else: a reply frame of
//    kind 5 whose 32-byte payload is HMAC(T, "gw-root" | Nc | Nr | MAC). The rank checks it
//    before it believes any other frame from this root; anything else first, or a wrong proof,
//    is "the root did not prove it holds the job's token".
//
// 5. then, root -> rank: progress frames, and last a table or an error.
//
// reply frame, root -> rank:
//        0     4  magic "GWBR"
//        4     2  protocol version (2)
//        6     2  kind: 1 table, 2 error, 3 progress, 4 challenge, 5 proof
//        8     8  payload_len (bytes after this 16-byte header)
//       16     .  payload
//   challenge, proof (payload_len 32): Nr, or the proof.
//   progress (payload_len 8): arrived u32 | nranks u32. Sent at once when a rank is admitted
//       (the acknowledgement) and then to every waiting rank at most every 500 ms while the
//       count changes, so a rank that times out can say how far the job got.
//   table (ends the conversation): nranks u32, then for rank 0..nranks-1: len u32 | len bytes,
//       then TAG = HMAC(K, "gw-table" | SHA-256(the payload before TAG)) with the connection's
//       key K = HMAC(T, "gw-session" | Nr | Nc). payload_len = 4 + sum(4 + len) + 32
//       <= 4 + nranks * (4 + 65536) + 32. The rank checks TAG before it parses the table.
//   error (ends the conversation): code u32 | arrived u32 | nranks u32 | UTF-8 text
//       (payload_len - 12 <= 4096 bytes). Codes: 1 rejected (bad fields, duplicate rank, nranks
//       mismatch), 2 the root's deadline passed, 3 unsupported protocol version, 4 the process
//       hosting the root is exiting, 5 the job is already complete. A rank reports code 2 as
//       kTimeout and every other code as kRemote.
//   Progress and error frames carry no MAC: after the proof they come from the root unless
//   someone on the path forges them, who could as well cut the connection. The table, which
//   the job acts on, does.
// After its last frame the root half-closes (shutdown SHUT_WR), waits briefly for the rank to
// close, then closes.
//
// Rejections. A connection whose first bytes are not the hello magic, whose auth frame has a
// wrong MAC (another token, or a hello replayed from another connection), that announces a
// blob over the limit, that sends bytes out of turn, or that has not sent a complete hello and
// auth frame 10 s after it was accepted, is closed without a reply and logged (GW_WARN, with
// the peer address and the reason); it changes nothing in the job. All it has seen is a
// challenge. A version mismatch gets error 3; an authenticated rank with bad fields, a
// duplicate rank or a different nranks gets its proof and then error 1 before the close. A
// rank that disconnects before the table is ready gives its slot back.
//
// THE SERVER. One thread per job with one epoll loop over the listener and every connection:
// each connection has its own state (reading hello, reading auth, joined, closing) and its own
// deadline, so a silent, slow or hostile peer cannot hold up the others, and every write is
// non-blocking with its own output queue (the table is built and hashed once and shared by all
// the queues; each connection adds its own 32-byte tag). At most 1024
// connections may be mid-hello at once; beyond that the root stops accepting for a while and
// the kernel's backlog holds newcomers. The thread is detached and owns its state through a
// shared_ptr, so nothing is left joinable at exit; it ends when the tables (or the timeout
// errors) are delivered, at the deadline, or when the process exits: an atexit hook asks every
// root to stop and waits up to 2 s for them.
#include "transport/bootstrap/root_server.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/log.hpp"
#include "transport/bootstrap/frames.hpp"
#include "transport/bootstrap/unique_id.hpp"

namespace gw::bootstrap {
namespace {

using std::chrono::milliseconds;

constexpr auto kHelloTimeout = std::chrono::seconds(10);    // a connection must authenticate by then
constexpr auto kDeliverTimeout = std::chrono::seconds(30);  // to hand out the tables
constexpr auto kErrorLinger = std::chrono::seconds(2);      // after an error reply to one connection
constexpr auto kTimeoutFlush = std::chrono::seconds(5);     // to hand out the timeout errors
constexpr auto kProgressEvery = milliseconds(500);
constexpr auto kPauseOnFdExhaustion = milliseconds(100);
constexpr int kTickMs = 50;  // deadlines are checked at least this often
constexpr size_t kMaxPending = 1024;
constexpr uint64_t kRejectionsLogged = 16;  // at WARN level per root; the rest at TRACE

// Process-wide bookkeeping for the exit hook.
std::atomic<bool> g_stopping{false};
std::atomic<int> g_running{0};
std::once_flag g_hooks_once;

void stop_roots_at_exit() {
  g_stopping.store(true);
  const auto until = Clock::now() + std::chrono::seconds(2);
  while (g_running.load() > 0 && Clock::now() < until) std::this_thread::sleep_for(milliseconds(1));
}

// A forked child has none of its parent's threads.
void forget_roots_after_fork() { g_running.store(0); }

void install_hooks() {
  std::atexit(stop_roots_at_exit);
  pthread_atfork(nullptr, nullptr, forget_roots_after_fork);
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// kHello: waiting for the hello; kAuth: challenge sent, waiting for the auth frame.
enum class St { kHello, kAuth, kJoined, kClosing };

struct Conn {
  uint64_t id = 0;
  Socket sock;
  std::string peer;
  St st = St::kHello;
  Clock::time_point deadline;  // kHello, kAuth: authenticate by; kClosing: be done by
  std::string in;              // the hello or auth frame so far
  uint8_t rank_nonce[frames::kNonceBytes] = {};
  uint8_t root_nonce[frames::kNonceBytes] = {};
  uint8_t key[frames::kMacBytes] = {};  // the session key for the table's tag
  uint32_t rank = 0;
  std::deque<std::shared_ptr<const std::string>> out;
  size_t out_off = 0;
  bool wr_shut = false;
};

using Frame = std::shared_ptr<const std::string>;

class Root {
 public:
  Root(Socket listener, const Endpoint& where, const uint8_t token[16], milliseconds timeout)
      : listener_(std::move(listener)), where_(where.to_string()), timeout_(timeout) {
    std::memcpy(token_, token, 16);
  }

  Status init() {
    epoll_ = Socket(epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_.valid()) return Status(Code::kSystem, std::string("epoll_create1: ") + std::strerror(errno));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = 0;
    if (epoll_ctl(epoll_.fd(), EPOLL_CTL_ADD, listener_.fd(), &ev) != 0) {
      return Status(Code::kSystem, std::string("epoll_ctl: ") + std::strerror(errno));
    }
    return Status::ok();
  }

  void serve() {
    start_ = Clock::now();
    deadline_ = start_ + timeout_;
    last_broadcast_ = start_;
    std::vector<epoll_event> events(256);
    while (true) {
      if (g_stopping.load()) {
        stop_for_exit();
        return;
      }
      auto now = Clock::now();
      if (!flushing_ && now >= deadline_) gather_timed_out(now);
      if (flushing_ && (closing_ == 0 || now >= flush_deadline_)) {
        finish();
        return;
      }
      const int n = epoll_wait(epoll_.fd(), events.data(), static_cast<int>(events.size()), kTickMs);
      if (n < 0 && errno != EINTR) {
        GW_WARN(kBootstrap, "bootstrap root %s: epoll_wait failed (%s); giving up on the job", where_.c_str(),
                std::strerror(errno));
        finish();
        return;
      }
      for (int i = 0; i < n; ++i) {
        const uint64_t id = events[static_cast<size_t>(i)].data.u64;
        const uint32_t what = events[static_cast<size_t>(i)].events;
        if (id == 0) {
          accept_ready();
          continue;
        }
        auto it = conns_.find(id);
        if (it == conns_.end() || !it->second.sock.valid()) continue;
        Conn& c = it->second;
        if (what & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) on_readable(c);
        if (c.sock.valid() && (what & EPOLLOUT)) flush(c);
      }
      now = Clock::now();
      if (!flushing_ && nranks_ > 0 && arrived_ == nranks_) job_complete(now);
      if (!flushing_) broadcast_progress(now);
      sweep(now);
      reap();
      resume_accepting(now);
    }
  }

 private:
  // ---- connections -------------------------------------------------------------------------

  void accept_ready() {
    while (pending_ < kMaxPending) {
      sockaddr_storage sa{};
      socklen_t len = sizeof sa;
      const int fd = accept4(listener_.fd(), reinterpret_cast<sockaddr*>(&sa), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          if (!warned_fds_) {
            GW_WARN(kBootstrap, "bootstrap root %s: cannot accept (%s); pausing (raise the open-file limit, ulimit -n)",
                    where_.c_str(), std::strerror(errno));
            warned_fds_ = true;
          }
          pause_accepting(Clock::now() + kPauseOnFdExhaustion);
          return;
        }
        GW_WARN(kBootstrap, "bootstrap root %s: accept failed: %s", where_.c_str(), std::strerror(errno));
        return;
      }
      Socket s(fd);
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      const uint64_t id = next_id_++;
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
      ev.data.u64 = id;
      if (epoll_ctl(epoll_.fd(), EPOLL_CTL_ADD, fd, &ev) != 0) {
        GW_WARN(kBootstrap, "bootstrap root %s: epoll_ctl: %s", where_.c_str(), std::strerror(errno));
        continue;  // s closes the connection
      }
      Conn& c = conns_[id];
      c.id = id;
      c.sock = std::move(s);
      c.peer = Endpoint::from_sockaddr(reinterpret_cast<sockaddr*>(&sa)).to_string();
      c.deadline = Clock::now() + kHelloTimeout;
      ++pending_;
      GW_TRACE(kBootstrap, "bootstrap root %s: connection from %s", where_.c_str(), c.peer.c_str());
    }
    pause_accepting(Clock::now());  // too many connections mid-hello: let the backlog hold the rest
  }

  void pause_accepting(Clock::time_point until) {
    accept_resume_at_ = until;
    if (!accepting_ || !listener_.valid()) return;
    epoll_event ev{};
    ev.events = 0;
    ev.data.u64 = 0;
    epoll_ctl(epoll_.fd(), EPOLL_CTL_MOD, listener_.fd(), &ev);
    accepting_ = false;
  }

  void resume_accepting(Clock::time_point now) {
    if (accepting_ || !listener_.valid() || pending_ >= kMaxPending || now < accept_resume_at_) return;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = 0;
    epoll_ctl(epoll_.fd(), EPOLL_CTL_MOD, listener_.fd(), &ev);
    accepting_ = true;
  }

  size_t& count(St s) { return s == St::kHello || s == St::kAuth ? pending_ : s == St::kJoined ? joined_ : closing_; }

  void set_state(Conn& c, St st) {
    --count(c.st);
    c.st = st;
    ++count(st);
  }

  // Closes the connection now; the entry is erased by reap().
  void close_conn(Conn& c) {
    if (!c.sock.valid()) return;
    if (c.st == St::kJoined) unregister(c);
    --count(c.st);
    epoll_ctl(epoll_.fd(), EPOLL_CTL_DEL, c.sock.fd(), nullptr);
    c.sock.shutdown_and_close();
    c.out.clear();
    dead_.push_back(c.id);
  }

  void reject(Conn& c, const std::string& why) {
    if (++rejected_ <= kRejectionsLogged) {
      GW_WARN(kBootstrap, "bootstrap root %s: rejected connection from %s: %s%s", where_.c_str(), c.peer.c_str(),
              why.c_str(), rejected_ == kRejectionsLogged ? " (further rejections are logged at TRACE level)" : "");
    } else {
      GW_TRACE(kBootstrap, "bootstrap root %s: rejected connection from %s: %s", where_.c_str(), c.peer.c_str(),
               why.c_str());
    }
    close_conn(c);
  }

  // Replies with an error frame, then closes.
  void refuse(Conn& c, uint32_t code, const std::string& why) {
    GW_WARN(kBootstrap, "bootstrap root %s: refused %s: %s", where_.c_str(), c.peer.c_str(), why.c_str());
    if (c.st == St::kJoined) unregister(c);
    c.in.clear();
    set_state(c, St::kClosing);
    c.deadline = Clock::now() + kErrorLinger;
    enqueue(c, std::make_shared<const std::string>(frames::encode_error(code, arrived_, nranks_, why)));
  }

  void enqueue(Conn& c, Frame f) {
    c.out.push_back(std::move(f));
    flush(c);
  }

  void flush(Conn& c) {
    while (!c.out.empty()) {
      const std::string& front = *c.out.front();
      const ssize_t w =
          ::send(c.sock.fd(), front.data() + c.out_off, front.size() - c.out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;  // EPOLLOUT comes back
        if (c.st == St::kJoined) {
          GW_WARN(kBootstrap, "bootstrap root %s: rank %u (%s) went away: %s", where_.c_str(), c.rank, c.peer.c_str(),
                  std::strerror(errno));
        } else {
          GW_WARN(kBootstrap, "bootstrap root %s: could not reply to %s: %s", where_.c_str(), c.peer.c_str(),
                  std::strerror(errno));
        }
        close_conn(c);
        return;
      }
      c.out_off += static_cast<size_t>(w);
      if (c.out_off == front.size()) {
        c.out.pop_front();
        c.out_off = 0;
      }
    }
    if (c.st == St::kClosing && !c.wr_shut) {
      ::shutdown(c.sock.fd(), SHUT_WR);  // the rank reads everything, then sees the end
      c.wr_shut = true;
    }
  }

  void on_readable(Conn& c) {
    char buf[16384];
    while (c.sock.valid()) {
      const ssize_t r = ::recv(c.sock.fd(), buf, sizeof buf, 0);
      if (r > 0) {
        const auto n = static_cast<size_t>(r);
        switch (c.st) {
          case St::kHello:
            c.in.append(buf, n);
            on_hello(c);
            break;
          case St::kAuth:
            c.in.append(buf, n);
            on_auth(c);
            break;
          case St::kJoined: reject(c, "rank " + std::to_string(c.rank) + " sent bytes after its auth frame"); return;
          case St::kClosing: break;  // draining: whatever it sends is ignored
        }
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      const std::string why = r == 0 ? "closed the connection" : std::string(std::strerror(errno));
      switch (c.st) {
        case St::kHello:
          reject(c, c.in.empty() ? why + " without sending anything" : why + " in the middle of its hello");
          return;
        case St::kAuth:
          reject(c, c.in.empty() ? why + " after the challenge" : why + " in the middle of its auth frame");
          return;
        case St::kJoined:
          GW_WARN(kBootstrap, "bootstrap root %s: rank %u (%s) %s before the job was complete; its slot is open again",
                  where_.c_str(), c.rank, c.peer.c_str(), why.c_str());
          close_conn(c);
          return;
        case St::kClosing:
          if (!c.out.empty()) {
            GW_WARN(kBootstrap, "bootstrap root %s: %s %s before it had its reply", where_.c_str(), c.peer.c_str(),
                    why.c_str());
          }
          close_conn(c);
          return;
      }
    }
  }

  // The hello: the version and the rank's nonce. Answered with a challenge.
  void on_hello(Conn& c) {
    const frames::Hello h = frames::parse_hello(reinterpret_cast<const uint8_t*>(c.in.data()), c.in.size());
    if (h.verdict == frames::Verdict::kBad) {
      reject(c, h.why);
      return;
    }
    if (h.verdict == frames::Verdict::kNeedMore) return;
    if (h.version != frames::kVersion) {
      refuse(c, frames::kErrVersion,
             "protocol version " + std::to_string(h.version) + " is not supported (this root speaks version " +
                 std::to_string(frames::kVersion) + ")");
      return;
    }
    const Status drawn = random_bytes(c.root_nonce, sizeof c.root_nonce);
    if (!drawn.is_ok()) {
      reject(c, "no nonce for its challenge: " + drawn.message());
      return;
    }
    std::memcpy(c.rank_nonce, h.nonce, sizeof c.rank_nonce);
    c.in.clear();
    set_state(c, St::kAuth);
    enqueue(c, std::make_shared<const std::string>(frames::encode_challenge(c.root_nonce)));
  }

  // The auth frame: its MAC first, then the proof, then the fields.
  void on_auth(Conn& c) {
    const auto* p = reinterpret_cast<const uint8_t*>(c.in.data());
    const frames::Auth a = frames::parse_auth(p, c.in.size());
    if (a.verdict == frames::Verdict::kBad) {
      reject(c, a.why);
      return;
    }
    if (a.verdict == frames::Verdict::kNeedMore) return;
    if (!frames::verify_auth(token_, c.root_nonce, c.rank_nonce, p, a.size)) {
      reject(c,
             "wrong token: its MAC does not match (another job's rank, a stray, or a hello replayed from another "
             "connection)");
      return;
    }
    enqueue(c, std::make_shared<const std::string>(
                   frames::encode_proof(token_, c.rank_nonce, c.root_nonce, frames::auth_mac(p, a.size))));
    frames::session_key(token_, c.root_nonce, c.rank_nonce, c.key);
    if (a.nranks == 0 || a.nranks > frames::kMaxRanks || a.rank >= a.nranks) {
      refuse(c, frames::kErrRejected, "bad hello: rank " + std::to_string(a.rank) + " of " + std::to_string(a.nranks));
      return;
    }
    admit(c, a);
  }

  void admit(Conn& c, const frames::Auth& h) {
    const std::string who = "rank " + std::to_string(h.rank) + " of " + std::to_string(h.nranks);
    if (flushing_) {
      refuse(c, complete_ ? frames::kErrComplete : frames::kErrTimeout,
             complete_ ? who + ": the job is already complete" : who + ": the rendezvous has timed out");
      return;
    }
    if (nranks_ == 0) {
      nranks_ = h.nranks;
      blobs_.assign(nranks_, std::string());
      holder_.assign(nranks_, 0);
      raise_fd_limit();
    }
    if (h.nranks != nranks_) {
      refuse(c, frames::kErrRejected,
             who + ": the job has " + std::to_string(nranks_) + " ranks, this rank says " + std::to_string(h.nranks));
      return;
    }
    if (holder_[h.rank] != 0) {
      auto other = conns_.find(holder_[h.rank]);
      refuse(
          c, frames::kErrRejected,
          who + " has already joined" + (other != conns_.end() ? " (from " + other->second.peer + ")" : std::string()));
      return;
    }
    holder_[h.rank] = c.id;
    blobs_[h.rank] = c.in.substr(frames::kAuthFixed, h.blob_len);
    std::string().swap(c.in);
    c.rank = h.rank;
    set_state(c, St::kJoined);
    ++arrived_;
    GW_TRACE(kBootstrap, "bootstrap root %s: rank %u of %u arrived from %s (%u there)", where_.c_str(), h.rank, nranks_,
             c.peer.c_str(), arrived_);
    enqueue(c, std::make_shared<const std::string>(frames::encode_progress(arrived_, nranks_)));
  }

  void unregister(Conn& c) {
    holder_[c.rank] = 0;
    std::string().swap(blobs_[c.rank]);
    --arrived_;
  }

  // ---- the job -----------------------------------------------------------------------------

  void broadcast_progress(Clock::time_point now) {
    if (arrived_ == broadcast_arrived_ || now - last_broadcast_ < kProgressEvery) return;
    const Frame f = std::make_shared<const std::string>(frames::encode_progress(arrived_, nranks_));
    for (auto& [id, c] : conns_) {
      if (c.sock.valid() && c.st == St::kJoined) enqueue(c, f);
    }
    broadcast_arrived_ = arrived_;
    last_broadcast_ = now;
  }

  void job_complete(Clock::time_point now) {
    const Frame table = std::make_shared<const std::string>(frames::encode_table(blobs_));
    uint8_t digest[frames::kMacBytes];
    frames::table_digest(*table, digest);
    std::vector<std::string>().swap(blobs_);
    flushing_ = true;
    complete_ = true;
    flush_deadline_ = now + kDeliverTimeout;
    for (auto& [id, c] : conns_) {
      if (!c.sock.valid() || c.st != St::kJoined) continue;
      set_state(c, St::kClosing);
      c.deadline = flush_deadline_;
      c.out.push_back(table);  // both before the flush: the write side shuts once the queue is empty
      c.out.push_back(std::make_shared<const std::string>(frames::table_mac(c.key, digest)));
      flush(c);
    }
    GW_INFO(kBootstrap, "bootstrap root %s: all %u ranks arrived in %.3f s; sending the %zu-byte table", where_.c_str(),
            nranks_, seconds_between(start_, now), table->size());
  }

  std::string missing_ranks() const {
    std::string s;
    int listed = 0;
    for (uint32_t r = 0; r < nranks_; ++r) {
      if (holder_[r] != 0) continue;
      if (listed == 16) return s + ", ...";
      s += (listed++ == 0 ? "" : ", ") + std::to_string(r);
    }
    return s;
  }

  void gather_timed_out(Clock::time_point now) {
    std::string what;
    if (nranks_ == 0) {
      what = "no rank arrived";
    } else {
      what = std::to_string(arrived_) + " of " + std::to_string(nranks_) +
             " ranks arrived (missing: " + missing_ranks() + ")";
    }
    char took[32];
    std::snprintf(took, sizeof took, "%.1f", seconds_between(start_, now));
    const std::string text = "rendezvous timed out at the root " + where_ + " after " + took + " s: " + what;
    GW_WARN(kBootstrap, "bootstrap root %s: %s", where_.c_str(), text.c_str());
    flushing_ = true;
    flush_deadline_ = now + kTimeoutFlush;
    const Frame f =
        std::make_shared<const std::string>(frames::encode_error(frames::kErrTimeout, arrived_, nranks_, text));
    for (auto& [id, c] : conns_) {
      if (!c.sock.valid() || c.st != St::kJoined) continue;
      set_state(c, St::kClosing);  // keeps its slot: the count in the error stays right
      c.deadline = flush_deadline_;
      enqueue(c, f);
    }
  }

  void sweep(Clock::time_point now) {
    if (now - last_sweep_ < milliseconds(kTickMs)) return;
    last_sweep_ = now;
    for (auto& [id, c] : conns_) {
      if (!c.sock.valid() || now < c.deadline) continue;
      if (c.st == St::kHello || c.st == St::kAuth) {
        const std::string within = " within " + std::to_string(kHelloTimeout.count()) + " s";
        reject(c, c.st == St::kAuth ? "sent no complete auth frame" + within + " (it has the challenge)"
                  : c.in.empty()    ? "sent nothing" + within
                                    : "sent no complete hello" + within);
      } else if (c.st == St::kClosing) {
        if (!c.out.empty()) {
          GW_WARN(kBootstrap, "bootstrap root %s: %s did not take its reply in time", where_.c_str(), c.peer.c_str());
        }
        close_conn(c);
      }
    }
  }

  void reap() {
    for (uint64_t id : dead_) conns_.erase(id);
    dead_.clear();
  }

  void finish() {
    for (auto& [id, c] : conns_) {
      if (!c.sock.valid()) continue;
      if (c.st == St::kHello || c.st == St::kAuth) {
        reject(c, "still had not authenticated when the root finished");
      } else if (c.st == St::kClosing && !c.out.empty()) {
        GW_WARN(kBootstrap, "bootstrap root %s: %s did not take its reply in time", where_.c_str(), c.peer.c_str());
      }
      close_conn(c);
    }
    reap();
    listener_.shutdown_and_close();
    if (rejected_ > kRejectionsLogged) {
      GW_WARN(kBootstrap, "bootstrap root %s: rejected %llu connections in all", where_.c_str(),
              static_cast<unsigned long long>(rejected_));
    }
    GW_INFO(kBootstrap, "bootstrap root %s: done (%s)", where_.c_str(), complete_ ? "job complete" : "job incomplete");
  }

  // The process is exiting: tell waiting ranks, best effort, and go. No logging: the logger
  // may already be gone.
  void stop_for_exit() {
    const std::string msg = frames::encode_error(frames::kErrShutdown, arrived_, nranks_,
                                                 "the process hosting the rendezvous root is exiting");
    for (auto& [id, c] : conns_) {
      if (!c.sock.valid()) continue;
      if (c.st == St::kJoined) {
        const ssize_t ignored = ::send(c.sock.fd(), msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)ignored;
      }
      c.sock.shutdown_and_close();
    }
    listener_.shutdown_and_close();
  }

  void raise_fd_limit() {
    const rlim_t need = static_cast<rlim_t>(nranks_) + kMaxPending / 4 + 64;
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need) return;
    rlimit want = rl;
    want.rlim_cur = (rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need) ? need : rl.rlim_max;
    if (want.rlim_cur > rl.rlim_cur && setrlimit(RLIMIT_NOFILE, &want) == 0) {
      GW_INFO(kBootstrap, "bootstrap root %s: raised the open-file limit from %llu to %llu for %u ranks",
              where_.c_str(), static_cast<unsigned long long>(rl.rlim_cur),
              static_cast<unsigned long long>(want.rlim_cur), nranks_);
      rl = want;
    }
    if (rl.rlim_cur < need) {
      GW_WARN(kBootstrap, "bootstrap root %s: the open-file limit (%llu) is low for %u ranks; raise it (ulimit -n)",
              where_.c_str(), static_cast<unsigned long long>(rl.rlim_cur), nranks_);
    }
  }

  Socket listener_;
  Socket epoll_;
  const std::string where_;
  const milliseconds timeout_;
  uint8_t token_[16];

  Clock::time_point start_, deadline_, flush_deadline_;
  Clock::time_point last_sweep_{}, last_broadcast_{}, accept_resume_at_{};
  bool flushing_ = false;  // the job is over (complete or timed out): only replies are left to deliver
  bool complete_ = false;
  bool accepting_ = true;
  bool warned_fds_ = false;
  uint64_t rejected_ = 0;

  std::unordered_map<uint64_t, Conn> conns_;
  std::vector<uint64_t> dead_;
  uint64_t next_id_ = 1;  // 0 is the listener
  size_t pending_ = 0, joined_ = 0, closing_ = 0;

  uint32_t nranks_ = 0;  // 0 until the first valid hello
  uint32_t arrived_ = 0;
  uint32_t broadcast_arrived_ = 0;
  std::vector<std::string> blobs_;
  std::vector<uint64_t> holder_;  // the connection holding each rank, 0 for none
};

void run_root(const std::shared_ptr<Root>& root) {
  try {
    root->serve();
  } catch (const std::exception& e) {
    GW_WARN(kBootstrap, "bootstrap root: stopped by an exception: %s", e.what());
  } catch (...) {
    GW_WARN(kBootstrap, "bootstrap root: stopped by an unknown exception");
  }
}

}  // namespace

Status start_root_server(Socket listener, const Endpoint& where, const uint8_t token[16], milliseconds timeout) {
  std::call_once(g_hooks_once, install_hooks);
  std::shared_ptr<Root> root;
  try {
    root = std::make_shared<Root>(std::move(listener), where, token, timeout);
  } catch (const std::bad_alloc&) {
    return Status(Code::kOutOfMemory, "rendezvous root: out of memory");
  }
  GW_RETURN_IF_ERROR(root->init().with_context("rendezvous root"));

  // The thread starts with the usual asynchronous signals blocked, so they keep going to the
  // application's own threads.
  sigset_t block, old;
  sigemptyset(&block);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGALRM, SIGCHLD, SIGPIPE, SIGUSR1, SIGUSR2})
    sigaddset(&block, sig);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  g_running.fetch_add(1);
  Status status;
  try {
    // Detached: the closure owns the root; the count drops only once the root is destroyed.
    std::thread([root]() mutable {
      run_root(root);
      root.reset();
      g_running.fetch_sub(1);
    }).detach();
  } catch (const std::system_error& e) {
    g_running.fetch_sub(1);
    status = Status(Code::kSystem, std::string("cannot start the rendezvous root thread: ") + e.what());
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return status;
}

int running_root_servers() { return g_running.load(); }

}  // namespace gw::bootstrap
