// A rank's side of the rendezvous (protocol in root_server.cpp), by unique id or from the
// launcher's environment. Everything the root sends is untrusted until checked: lengths are
// bounded before anything is allocated and counts must match this job.
#include <arpa/inet.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "transport/bootstrap/bootstrap.hpp"
#include "transport/bootstrap/frames.hpp"
#include "transport/bootstrap/root_server.hpp"
#include "transport/bootstrap/socket.hpp"
#include "transport/bootstrap/unique_id.hpp"
#include "transport/log.hpp"

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
    return invalid_argument("nranks " + std::to_string(nranks) + " is not in [1, " + std::to_string(frames::kMaxRanks) + "]");
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

// One rank's conversation with the root.
class Join {
 public:
  Join(const Endpoint& root, const uint8_t token[16], int rank, int nranks, milliseconds timeout)
      : root_(root), rank_(rank), nranks_(static_cast<uint32_t>(nranks)), start_(Clock::now()),
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
    const std::string hello = frames::encode_hello(token_, static_cast<uint32_t>(rank_), nranks_, blob);
    GW_RETURN_IF_ERROR(io(write_exact(fd_, hello.data(), hello.size(), deadline_), "sending the hello"));
    while (true) {
      uint8_t head[frames::kReplyHeader];
      GW_RETURN_IF_ERROR(io(read_exact(fd_, head, sizeof head, deadline_), "waiting for the root"));
      const frames::ReplyHeader h = frames::parse_reply_header(head);
      if (std::memcmp(h.magic, frames::kReplyMagic, 4) != 0) {
        return malformed("a reply with a bad magic (is something other than a gradwire root listening there?)");
      }
      if (h.version != frames::kVersion) {
        return Status(Code::kRemote, prefix() + "the root at " + root_.to_string() + " speaks protocol version " +
                                         std::to_string(h.version) + ", this library speaks " + std::to_string(frames::kVersion));
      }
      switch (h.kind) {
        case frames::kProgress:
          GW_RETURN_IF_ERROR(read_progress(h.payload_len));
          break;
        case frames::kError:
          return read_error(h.payload_len);
        case frames::kTable:
          return read_table(h.payload_len, blob);
        default:
          return malformed("a reply of unknown kind " + std::to_string(h.kind));
      }
    }
  }

 private:
  std::string prefix() const {
    return "rendezvous of rank " + std::to_string(rank_) + " of " + std::to_string(nranks_) + " with " + root_.to_string() + ": ";
  }

  std::string progress() const {
    if (!acked_) return "the root never acknowledged this rank's hello (is another program listening on that port?)";
    return std::to_string(arrived_) + " of " + std::to_string(nranks_) + " ranks had arrived at the root's last report (" +
           secs(Clock::now() - report_at_) + " ago)";
  }

  Status malformed(const std::string& what) const {
    return Status(Code::kRemote, prefix() + "the root sent " + what);
  }

  // Turns a socket error into what it means for the rendezvous.
  Status io(const Status& s, const char* doing) const {
    if (s.is_ok()) return s;
    if (s.code() == Code::kTimeout) {
      return Status(Code::kTimeout, prefix() + "timed out after " + secs(Clock::now() - start_) + " " + doing + ": " + progress());
    }
    if (s.code() == Code::kRemote) {
      if (!acked_) {
        return Status(Code::kRemote, prefix() + "the root closed the connection without a reply while " + doing +
                                         " (" + s.message() + "): a wrong token (another job's root on this port?), or a root that is gone");
      }
      return Status(Code::kRemote, prefix() + "the root closed the connection before the table was ready (" +
                                       s.message() + "); " + progress());
    }
    return s.with_context(prefix() + doing);
  }

  Status read_payload(void* buf, size_t n) const {
    return io(read_exact(fd_, buf, n, deadline_), "reading the root's reply");
  }

  Status read_progress(uint64_t len) {
    if (len != frames::kProgressPayload) return malformed("a progress frame of " + std::to_string(len) + " bytes");
    uint8_t p[frames::kProgressPayload];
    GW_RETURN_IF_ERROR(read_payload(p, sizeof p));
    const uint32_t arrived = frames::get_u32(p), n = frames::get_u32(p + 4);
    if (n != nranks_ || arrived > n) {
      return malformed("progress " + std::to_string(arrived) + " of " + std::to_string(n) + " for a job of " + std::to_string(nranks_));
    }
    acked_ = true;
    arrived_ = arrived;
    report_at_ = Clock::now();
    return Status::ok();
  }

  Status read_error(uint64_t len) {
    if (len < frames::kErrorPayloadFixed || len > frames::kErrorPayloadFixed + frames::kMaxErrorText) {
      return malformed("an error frame of " + std::to_string(len) + " bytes");
    }
    std::string p(static_cast<size_t>(len), '\0');
    GW_RETURN_IF_ERROR(read_payload(p.data(), p.size()));
    const auto* b = reinterpret_cast<const uint8_t*>(p.data());
    const uint32_t code = frames::get_u32(b);
    std::string text = p.substr(frames::kErrorPayloadFixed);
    for (char& ch : text) {
      if (static_cast<unsigned char>(ch) < 0x20) ch = ' ';  // no control characters into logs
    }
    if (code == frames::kErrTimeout) return Status(Code::kTimeout, prefix() + text);
    return Status(Code::kRemote, prefix() + "the root refused this rank: " + text);
  }

  Result<std::vector<std::string>> read_table(uint64_t len, const std::string& own) {
    if (len < 4 + uint64_t{4} * nranks_ || len > frames::max_table_payload(nranks_)) {
      return malformed("a table of " + std::to_string(len) + " bytes, impossible for " + std::to_string(nranks_) + " ranks");
    }
    uint8_t word[4];
    GW_RETURN_IF_ERROR(read_payload(word, 4));
    if (frames::get_u32(word) != nranks_) {
      return malformed("a table of " + std::to_string(frames::get_u32(word)) + " ranks for a job of " + std::to_string(nranks_));
    }
    uint64_t used = 4;
    std::vector<std::string> table(nranks_);
    for (uint32_t r = 0; r < nranks_; ++r) {
      GW_RETURN_IF_ERROR(read_payload(word, 4));
      const uint32_t n = frames::get_u32(word);
      used += 4 + uint64_t{n};
      if (n > frames::kMaxBlob || used > len) {
        return malformed("a table entry of " + std::to_string(n) + " bytes for rank " + std::to_string(r));
      }
      table[r].resize(n);
      GW_RETURN_IF_ERROR(read_payload(table[r].data(), n));
    }
    if (used != len) return malformed("a table with " + std::to_string(len - used) + " trailing bytes");
    if (table[static_cast<size_t>(rank_)] != own) return malformed("a table whose entry for this rank is not the blob it sent");
    GW_TRACE("bootstrap: rank %d joined a job of %u through %s in %s", rank_, nranks_, root_.to_string().c_str(),
             secs(Clock::now() - start_).c_str());
    return table;
  }

  const Endpoint root_;
  uint8_t token_[16];
  const int rank_;
  const uint32_t nranks_;
  const Clock::time_point start_, deadline_;
  int fd_ = -1;
  bool acked_ = false;
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
      return Status(Code::kSystem, "rank 0 cannot serve the rendezvous root on port " + std::to_string(root.port) + " (" +
                                       listener.status().message() + "): another job or program may hold it; choose a free port with GW_PORT=<port> (or GW_ROOT=host:port)");
    }
    GW_INFO("bootstrap: rank 0 serves the %s rendezvous root on %s (advertised as %s)", env.launcher.c_str(),
            bind_ep.to_string().c_str(), root.to_string().c_str());
    GW_RETURN_IF_ERROR(start_root_server(std::move(listener).value(), root, env.token, timeout));
  }
  return Join(root, env.token, env.rank, env.size, timeout).run(blob);
}

}  // namespace gw::bootstrap
