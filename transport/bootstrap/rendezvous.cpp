// A rank's side of the rendezvous (protocol in root_server.cpp), by unique id or from the
// launcher's environment. Everything the root sends is untrusted until checked: the root must
// prove it holds the token before anything else it says counts, the table must carry this
// connection's MAC, lengths are bounded before memory grows, and counts must match this job.
#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/log.hpp"
#include "transport/bootstrap/bootstrap.hpp"
#include "transport/bootstrap/frames.hpp"
#include "transport/bootstrap/hmac_sha256.hpp"
#include "transport/bootstrap/root_server.hpp"
#include "transport/bootstrap/socket.hpp"
#include "transport/bootstrap/unique_id.hpp"

namespace gw::bootstrap {
namespace {

using std::chrono::milliseconds;

std::string secs(Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

Status check_job(int rank, int nranks, const std::string& blob, milliseconds timeout) {
  if (nranks < 1 || static_cast<uint32_t>(nranks) > frames::kMaxRanks) {
    return invalid_argument("nranks " + std::to_string(nranks) + " is not in [1, " + std::to_string(frames::kMaxRanks) +
                            "]");
  }
  if (rank < 0 || rank >= nranks) {
    return invalid_argument("rank " + std::to_string(rank) + " is not in [0, " + std::to_string(nranks) + ")");
  }
  if (blob.size() > frames::kMaxBlob) {
    return invalid_argument("the rendezvous blob has " + std::to_string(blob.size()) + " bytes; the limit is " +
                            std::to_string(frames::kMaxBlob));
  }
  if (timeout.count() <= 0) return invalid_argument("the rendezvous timeout must be positive");
  return Status::ok();
}

// One rank's conversation with the root: hello, challenge, auth, proof, then progress frames
// until the table or an error. Nothing the root sends is believed before its proof checks out.
class Join {
 public:
  Join(const Endpoint& root, const uint8_t token[16], int rank, int nranks, milliseconds timeout)
      : root_(root),
        rank_(rank),
        nranks_(static_cast<uint32_t>(nranks)),
        start_(Clock::now()),
        deadline_(start_ + timeout) {
    std::memcpy(token_, token, 16);
  }

  Result<std::vector<std::string>> run(const std::string& blob) {
    auto sock = connect_until(root_, deadline_);
    if (!sock.is_ok()) {
      if (sock.status().code() == Code::kTimeout) {
        return Status(Code::kTimeout, prefix() + "timed out after " + secs(Clock::now() - start_) +
                                          ": the root was not reachable (" + sock.status().message() + ")");
      }
      return sock.status().with_context(prefix() + "connecting to the root at " + root_.to_string());
    }
    fd_ = sock->fd();
    uint8_t rank_nonce[frames::kNonceBytes];
    GW_RETURN_IF_ERROR(random_bytes(rank_nonce, sizeof rank_nonce).with_context(prefix() + "drawing a nonce"));
    const std::string hello = frames::encode_hello(rank_nonce);
    GW_RETURN_IF_ERROR(io(write_exact(fd_, hello.data(), hello.size(), deadline_), "sending the hello"));

    Frame f;
    GW_RETURN_IF_ERROR(read_frame(&f, "waiting for the root's challenge"));
    if (f.kind != frames::kChallenge)
      return unproven("it answered the hello with " + kind_name(f.kind) + ", not a challenge");
    uint8_t root_nonce[frames::kNonceBytes];
    std::string why;
    if (!frames::parse_nonce_payload(bytes(f), f.payload.size(), root_nonce, &why)) return malformed(why);
    challenged_ = true;

    const std::string auth =
        frames::encode_auth(token_, root_nonce, rank_nonce, static_cast<uint32_t>(rank_), nranks_, blob);
    GW_RETURN_IF_ERROR(io(write_exact(fd_, auth.data(), auth.size(), deadline_), "sending the auth frame"));

    GW_RETURN_IF_ERROR(read_frame(&f, "waiting for the root's proof"));
    if (f.kind != frames::kProof) return unproven("it answered with " + kind_name(f.kind) + " before its proof");
    uint8_t got[frames::kMacBytes], want[frames::kMacBytes];
    if (!frames::parse_nonce_payload(bytes(f), f.payload.size(), got, &why)) return malformed(why);
    frames::root_proof(token_, rank_nonce, root_nonce,
                       frames::auth_mac(reinterpret_cast<const uint8_t*>(auth.data()), auth.size()), want);
    if (!equal_constant_time(got, want, frames::kMacBytes)) return unproven("its proof is wrong");
    proven_ = true;
    frames::session_key(token_, root_nonce, rank_nonce, key_);

    while (true) {
      GW_RETURN_IF_ERROR(read_frame(&f, "waiting for the root"));
      switch (f.kind) {
        case frames::kProgress: GW_RETURN_IF_ERROR(on_progress(f)); break;
        case frames::kError: return on_error(f);
        case frames::kTable: return on_table(f, blob);
        default: return malformed(kind_name(f.kind) + " after the handshake");
      }
    }
  }

 private:
  struct Frame {
    uint16_t kind = 0;
    std::string payload;
  };

  static const uint8_t* bytes(const Frame& f) { return reinterpret_cast<const uint8_t*>(f.payload.data()); }

  static std::string kind_name(uint16_t kind) {
    switch (kind) {
      case frames::kTable: return "a table";
      case frames::kError: return "an error frame";
      case frames::kProgress: return "a progress frame";
      case frames::kChallenge: return "a challenge";
      case frames::kProof: return "a proof";
      default: return "a frame of kind " + std::to_string(kind);
    }
  }

  std::string prefix() const {
    return "rendezvous of rank " + std::to_string(rank_) + " of " + std::to_string(nranks_) + " with " +
           root_.to_string() + ": ";
  }

  std::string progress() const {
    if (!challenged_)
      return "the root never acknowledged this rank's hello (is another program listening on that port?)";
    if (!proven_) return "the root sent a challenge but never proved it holds the job's token";
    if (!acked_) return "the root proved itself but never acknowledged this rank";
    return std::to_string(arrived_) + " of " + std::to_string(nranks_) +
           " ranks had arrived at the root's last report (" + secs(Clock::now() - report_at_) + " ago)";
  }

  Status malformed(const std::string& what) const { return Status(Code::kRemote, prefix() + "the root sent " + what); }

  Status unproven(const std::string& detail) const {
    return Status(Code::kRemote, prefix() + "the root at " + root_.to_string() +
                                     " did not prove it holds the job's token (another job's root, or a stranger on "
                                     "the port): " +
                                     detail);
  }

  // Turns a socket error into what it means for the rendezvous.
  Status io(const Status& s, const char* doing) const {
    if (s.is_ok()) return s;
    if (s.code() == Code::kTimeout) {
      return Status(Code::kTimeout,
                    prefix() + "timed out after " + secs(Clock::now() - start_) + " " + doing + ": " + progress());
    }
    if (s.code() == Code::kRemote) {
      if (!proven_) {
        return Status(Code::kRemote, prefix() + "the root at " + root_.to_string() +
                                         " closed the connection without proving it holds the job's token, while " +
                                         doing + " (" + s.message() +
                                         "): a root holding another token (another job's root on this port, or "
                                         "GW_TOKEN not the same on every rank?), a stranger, or a root that is gone");
      }
      return Status(Code::kRemote, prefix() + "the root closed the connection before the table was ready (" +
                                       s.message() + "); " + progress());
    }
    return s.with_context(prefix() + doing);
  }

  // Reads one reply frame whose header passed its checks. A table's payload is read in slices
  // so that memory grows only with the bytes that actually arrive.
  Status read_frame(Frame* f, const char* doing) {
    uint8_t head[frames::kReplyHeader];
    GW_RETURN_IF_ERROR(io(read_exact(fd_, head, sizeof head, deadline_), doing));
    const frames::ReplyHeader h = frames::parse_reply_header(head);
    std::string why;
    const frames::HeaderProblem problem = frames::check_reply_header(h, nranks_, &why);
    if (problem == frames::HeaderProblem::kBadVersion) {
      return Status(Code::kRemote, prefix() + "the root at " + root_.to_string() + " speaks protocol version " +
                                       std::to_string(h.version) + ", this library speaks " +
                                       std::to_string(frames::kVersion));
    }
    if (problem != frames::HeaderProblem::kNone) return malformed(why);
    f->kind = h.kind;
    f->payload.clear();
    constexpr uint64_t kSlice = uint64_t{1} << 20;
    while (f->payload.size() < h.payload_len) {
      const size_t have = f->payload.size();
      const size_t take = static_cast<size_t>(std::min<uint64_t>(kSlice, h.payload_len - have));
      f->payload.resize(have + take);
      GW_RETURN_IF_ERROR(io(read_exact(fd_, f->payload.data() + have, take, deadline_), "reading the root's reply"));
    }
    return Status::ok();
  }

  Status on_progress(const Frame& f) {
    frames::Progress p;
    std::string why;
    if (!frames::parse_progress(bytes(f), f.payload.size(), nranks_, &p, &why)) return malformed(why);
    acked_ = true;
    arrived_ = p.arrived;
    report_at_ = Clock::now();
    return Status::ok();
  }

  Status on_error(const Frame& f) const {
    frames::Error e;
    std::string why;
    if (!frames::parse_error(bytes(f), f.payload.size(), &e, &why)) return malformed(why);
    if (e.code == frames::kErrTimeout) return Status(Code::kTimeout, prefix() + e.text);
    return Status(Code::kRemote, prefix() + "the root refused this rank: " + e.text);
  }

  Result<std::vector<std::string>> on_table(const Frame& f, const std::string& own) const {
    if (!frames::verify_table(key_, bytes(f), f.payload.size())) {
      return Status(Code::kRemote, prefix() + "the table from " + root_.to_string() +
                                       " fails its MAC (tampered with on the way?); not using it");
    }
    std::vector<std::string> table;
    std::string why;
    if (!frames::parse_table(bytes(f), f.payload.size(), nranks_, &table, &why)) return malformed(why);
    if (table[static_cast<size_t>(rank_)] != own)
      return malformed("a table whose entry for this rank is not the blob it sent");
    GW_TRACE(kBootstrap, "bootstrap: rank %d joined a job of %u through %s in %s", rank_, nranks_,
             root_.to_string().c_str(), secs(Clock::now() - start_).c_str());
    return table;
  }

  const Endpoint root_;
  uint8_t token_[16];
  const int rank_;
  const uint32_t nranks_;
  const Clock::time_point start_, deadline_;
  int fd_ = -1;
  bool challenged_ = false;  // the root answered the hello with a challenge
  bool proven_ = false;      // and proved it holds the token
  bool acked_ = false;       // and admitted this rank
  uint8_t key_[frames::kMacBytes] = {};
  uint32_t arrived_ = 0;
  Clock::time_point report_at_{};
};

// A numeric loopback address names this host to every rank; anything else (a name, a
// routable address) may resolve differently elsewhere or sit behind NAT, so rank 0 listens on
// every interface instead and the token keeps strangers out.
bool bind_exactly(const std::string& text, const Endpoint& ep) {
  std::string host = text;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  uint8_t buf[16];
  const bool numeric = inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
  return numeric && ep.is_loopback();
}

}  // namespace

Result<std::vector<std::string>> rendezvous(const UniqueId& id, int rank, int nranks, const std::string& blob,
                                            milliseconds timeout) {
  GW_RETURN_IF_ERROR(check_job(rank, nranks, blob, timeout));
  GW_RETURN_IF_ERROR(validate_unique_id(id));
  return Join(unique_id_endpoint(id), unique_id_token(id), rank, nranks, timeout).run(blob);
}

Result<std::vector<std::string>> rendezvous_from_env(const LaunchEnv& env, const std::string& blob,
                                                     milliseconds timeout) {
  GW_RETURN_IF_ERROR(check_job(env.rank, env.size, blob, timeout));
  if (env.size == 1) return std::vector<std::string>{blob};  // nobody to meet
  if (env.root_port == 0) return invalid_argument("the launch environment names no rendezvous port");
  auto resolved = resolve_host(env.root_address, env.root_port);
  if (!resolved.is_ok()) return resolved.status().with_context("rendezvous root address (GW_ROOT or MASTER_ADDR)");
  const Endpoint root = *resolved;
  if (env.rank == 0) {
    Endpoint bind_ep = bind_exactly(env.root_address, root) ? root : Endpoint::any(root.family, root.port);
    int err = 0;
    auto listener = listen_on(bind_ep, 4096, &err);
    if (!listener.is_ok() && err == EADDRNOTAVAIL && !bind_ep.is_wildcard()) {
      bind_ep = Endpoint::any(root.family, root.port);
      listener = listen_on(bind_ep, 4096, &err);
    }
    if (!listener.is_ok()) {
      return Status(
          Code::kSystem,
          "rank 0 cannot serve the rendezvous root on port " + std::to_string(root.port) + " (" +
              listener.status().message() +
              "): another job or program may hold it; choose a free port with GW_PORT=<port> (or GW_ROOT=host:port)");
    }
    GW_INFO(kBootstrap, "bootstrap: rank 0 serves the %s rendezvous root on %s (advertised as %s)",
            env.launcher.c_str(), bind_ep.to_string().c_str(), root.to_string().c_str());
    GW_RETURN_IF_ERROR(start_root_server(std::move(listener).value(), root, env.token, timeout));
  }
  return Join(root, env.token, env.rank, env.size, timeout).run(blob);
}

}  // namespace gw::bootstrap
