// A small TCP layer for the bootstrap: an RAII descriptor, an IPv4/IPv6 endpoint, and I/O in
// which every wait is bounded by a deadline (non-blocking sockets plus poll, EINTR retried).
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "gradwire/status.hpp"

namespace gw::bootstrap {

using Clock = std::chrono::steady_clock;

// Owns one file descriptor; closes it on destruction.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { reset(); }
  Socket(Socket&& o) noexcept : fd_(o.release()) {}
  Socket& operator=(Socket&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    const int f = fd_;
    fd_ = -1;
    return f;
  }
  // close(); the descriptor is invalid afterwards.
  void reset();
  // shutdown(SHUT_RDWR) then close(): the peer sees the end of the stream even when a forked
  // child still holds a copy of the descriptor.
  void shutdown_and_close();

 private:
  int fd_ = -1;
};

// An IPv4 or IPv6 address with a port (host byte order).
struct Endpoint {
  int family = AF_INET;   // AF_INET or AF_INET6
  uint8_t addr[16] = {};  // network byte order; IPv4 uses the first 4 bytes
  uint16_t port = 0;

  static Endpoint loopback_v4(uint16_t port);
  static Endpoint any(int family, uint16_t port);
  static Endpoint from_sockaddr(const sockaddr* sa);
  socklen_t to_sockaddr(sockaddr_storage* out) const;

  bool is_wildcard() const;
  bool is_loopback() const;
  std::string host() const;       // "10.0.0.1" or "fd00::2"
  std::string to_string() const;  // "10.0.0.1:5000" or "[fd00::2]:5000"
};

// Whether h is made of the characters a host name or a numeric address can hold (so that
// garbage fails fast instead of going to the resolver).
bool plausible_host(const std::string& h);

// A numeric address (IPv4, IPv6, or IPv6 in brackets) or a host name, resolved with
// getaddrinfo (IPv4 preferred). kInvalidArgument when it cannot be resolved.
Result<Endpoint> resolve_host(const std::string& host, uint16_t port);

// The address of an interface that is up. `ifname` empty: the first non-loopback IPv4
// interface (container bridges such as docker0 only when nothing else is up). Otherwise the
// interface of that exact name (its IPv4 address, else a global IPv6 one), or failing that the
// first interface whose name starts with `ifname`. kInvalidArgument when none matches.
Result<Endpoint> interface_address(const std::string& ifname);

Status set_nonblocking(int fd);

// Binds (SO_REUSEADDR) and listens on ep, non-blocking and close-on-exec; port 0 picks a free
// port, and ep.port is set to the port bound. Failure to bind is kSystem naming ep, with the
// errno also stored in *bind_errno when given.
Result<Socket> listen_on(Endpoint& ep, int backlog, int* bind_errno = nullptr);

// Connects with a non-blocking connect + poll; refused or unreachable attempts are retried with
// a growing, jittered backoff until the deadline (the peer may not be listening yet). kTimeout
// at the deadline, with the last error seen; kSystem for an error retrying cannot cure.
Result<Socket> connect_until(const Endpoint& ep, Clock::time_point deadline);

// Reads exactly n bytes from a non-blocking socket. kTimeout at the deadline, kRemote when the
// peer closes or resets the connection, kSystem for other errors.
Status read_exact(int fd, void* buf, size_t n, Clock::time_point deadline);
// Writes exactly n bytes (never raises SIGPIPE). Same error codes as read_exact.
Status write_exact(int fd, const void* buf, size_t n, Clock::time_point deadline);

// "addr:port" of the connected peer, or "?".
std::string peer_name(int fd);

// Milliseconds from now to the deadline, rounded up, clamped to [0, cap_ms].
int millis_until(Clock::time_point deadline, int cap_ms);

}  // namespace gw::bootstrap
