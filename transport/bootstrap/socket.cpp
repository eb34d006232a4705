#include "transport/bootstrap/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <thread>

namespace gw::bootstrap {
namespace {

Status sys_error(const std::string& what, int err) { return Status(Code::kSystem, what + ": " + std::strerror(err)); }

// Waits for `events` on fd. Returns false at the deadline; an error or hang-up counts as
// ready (the following recv/send reports it).
Result<bool> wait_ready(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int ms = millis_until(deadline, 1000);
    const int r = ::poll(&p, 1, ms);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return sys_error("poll", errno);
    if (r == 0 && Clock::now() >= deadline) return false;
  }
}

// Errors after which another connection attempt may succeed (nobody listening yet, a route
// not up yet, ephemeral ports momentarily exhausted).
bool retryable_connect_error(int err) {
  switch (err) {
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case ETIMEDOUT:
    case ENETUNREACH:
    case EHOSTUNREACH:
    case ENETDOWN:
    case EHOSTDOWN:
    case EADDRNOTAVAIL:
    case EAGAIN: return true;
    default: return false;
  }
}

bool peer_gone(int err) { return err == ECONNRESET || err == EPIPE || err == ENOTCONN || err == ECONNABORTED; }

bool is_container_bridge(const char* name) {
  static const char* const kPrefixes[] = {"docker", "virbr", "veth", "br-", "cni", "flannel", "lxc"};
  for (const char* p : kPrefixes) {
    if (std::strncmp(name, p, std::strlen(p)) == 0) return true;
  }
  return false;
}

bool usable_v6(const sockaddr_in6* a) {
  return !IN6_IS_ADDR_LINKLOCAL(&a->sin6_addr) && !IN6_IS_ADDR_LOOPBACK(&a->sin6_addr) &&
         !IN6_IS_ADDR_UNSPECIFIED(&a->sin6_addr);
}

}  // namespace

void Socket::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::shutdown_and_close() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  reset();
}

Endpoint Endpoint::loopback_v4(uint16_t port) {
  Endpoint ep;
  ep.family = AF_INET;
  const uint32_t lo = htonl(INADDR_LOOPBACK);
  std::memcpy(ep.addr, &lo, 4);
  ep.port = port;
  return ep;
}

Endpoint Endpoint::any(int family, uint16_t port) {
  Endpoint ep;
  ep.family = family;
  ep.port = port;
  return ep;  // all-zero address: INADDR_ANY / in6addr_any
}

Endpoint Endpoint::from_sockaddr(const sockaddr* sa) {
  Endpoint ep;
  if (sa->sa_family == AF_INET6) {
    const auto* s6 = reinterpret_cast<const sockaddr_in6*>(sa);
    ep.family = AF_INET6;
    std::memcpy(ep.addr, &s6->sin6_addr, 16);
    ep.port = ntohs(s6->sin6_port);
  } else {
    const auto* s4 = reinterpret_cast<const sockaddr_in*>(sa);
    ep.family = AF_INET;
    std::memcpy(ep.addr, &s4->sin_addr, 4);
    ep.port = ntohs(s4->sin_port);
  }
  return ep;
}

socklen_t Endpoint::to_sockaddr(sockaddr_storage* out) const {
  std::memset(out, 0, sizeof *out);
  if (family == AF_INET6) {
    auto* s6 = reinterpret_cast<sockaddr_in6*>(out);
    s6->sin6_family = AF_INET6;
    std::memcpy(&s6->sin6_addr, addr, 16);
    s6->sin6_port = htons(port);
    return sizeof(sockaddr_in6);
  }
  auto* s4 = reinterpret_cast<sockaddr_in*>(out);
  s4->sin_family = AF_INET;
  std::memcpy(&s4->sin_addr, addr, 4);
  s4->sin_port = htons(port);
  return sizeof(sockaddr_in);
}

bool Endpoint::is_wildcard() const {
  const size_t n = family == AF_INET6 ? 16 : 4;
  return std::all_of(addr, addr + n, [](uint8_t b) { return b == 0; });
}

bool Endpoint::is_loopback() const {
  if (family == AF_INET) return addr[0] == 127;
  in6_addr a;
  std::memcpy(&a, addr, 16);
  return IN6_IS_ADDR_LOOPBACK(&a) != 0;
}

std::string Endpoint::host() const {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (inet_ntop(family, addr, buf, sizeof buf) == nullptr) return "?";
  return buf;
}

std::string Endpoint::to_string() const {
  if (family == AF_INET6) return "[" + host() + "]:" + std::to_string(port);
  return host() + ":" + std::to_string(port);
}

bool plausible_host(const std::string& h) {
  if (h.empty() || h.size() > 255) return false;
  return std::all_of(h.begin(), h.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
           c == '_' || c == ':' || c == '%';
  });
}

Result<Endpoint> resolve_host(const std::string& host_in, uint16_t port) {
  std::string host = host_in;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (!plausible_host(host)) return invalid_argument("'" + host.substr(0, 64) + "' is not a host name or address");
  Endpoint ep;
  ep.port = port;
  if (inet_pton(AF_INET, host.c_str(), ep.addr) == 1) {
    ep.family = AF_INET;
    return ep;
  }
  if (inet_pton(AF_INET6, host.c_str(), ep.addr) == 1) {
    ep.family = AF_INET6;
    return ep;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return invalid_argument("cannot resolve host '" + host + "': " + (rc != 0 ? gai_strerror(rc) : "no address"));
  }
  const addrinfo* pick = nullptr;
  for (const addrinfo* a = res; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      pick = a;
      break;
    }
    if (a->ai_family == AF_INET6 && pick == nullptr) pick = a;
  }
  if (pick == nullptr) {
    freeaddrinfo(res);
    return invalid_argument("host '" + host + "' has no IPv4 or IPv6 address");
  }
  ep = Endpoint::from_sockaddr(pick->ai_addr);
  ep.port = port;
  freeaddrinfo(res);
  return ep;
}

Result<Endpoint> interface_address(const std::string& ifname) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return sys_error("getifaddrs", errno);
  // Candidates in order of preference; the first pass that finds one wins.
  auto find = [&](auto&& accept) -> const ifaddrs* {
    for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || (i->ifa_flags & IFF_UP) == 0) continue;
      if (accept(i)) return i;
    }
    return nullptr;
  };
  auto v4 = [](const ifaddrs* i) { return i->ifa_addr->sa_family == AF_INET; };
  auto v6 = [](const ifaddrs* i) {
    return i->ifa_addr->sa_family == AF_INET6 && usable_v6(reinterpret_cast<const sockaddr_in6*>(i->ifa_addr));
  };
  const ifaddrs* hit = nullptr;
  if (ifname.empty()) {
    auto plain_v4 = [&](const ifaddrs* i) {
      return v4(i) && (i->ifa_flags & IFF_LOOPBACK) == 0 && !is_container_bridge(i->ifa_name);
    };
    hit = find(plain_v4);
    if (hit == nullptr) hit = find([&](const ifaddrs* i) { return v4(i) && (i->ifa_flags & IFF_LOOPBACK) == 0; });
  } else {
    auto exact = [&](const ifaddrs* i) { return ifname == i->ifa_name; };
    auto prefix = [&](const ifaddrs* i) { return std::strncmp(i->ifa_name, ifname.c_str(), ifname.size()) == 0; };
    hit = find([&](const ifaddrs* i) { return exact(i) && v4(i); });
    if (hit == nullptr) hit = find([&](const ifaddrs* i) { return exact(i) && v6(i); });
    if (hit == nullptr) hit = find([&](const ifaddrs* i) { return prefix(i) && v4(i); });
    if (hit == nullptr) hit = find([&](const ifaddrs* i) { return prefix(i) && v6(i); });
  }
  Result<Endpoint> out = invalid_argument(ifname.empty() ? "no non-loopback IPv4 interface is up"
                                                         : "no interface that is up matches '" + ifname + "'");
  if (hit != nullptr) out = Endpoint::from_sockaddr(hit->ifa_addr);
  freeifaddrs(list);
  return out;
}

int millis_until(Clock::time_point deadline, int cap_ms) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > cap_ms ? cap_ms : static_cast<int>(left);
}

Status set_nonblocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return sys_error("fcntl(O_NONBLOCK)", errno);
  return Status::ok();
}

Result<Socket> listen_on(Endpoint& ep, int backlog, int* bind_errno) {
  if (bind_errno != nullptr) *bind_errno = 0;
  Socket s(::socket(ep.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!s.valid()) return sys_error("socket", errno);
  const int one = 1;
  if (setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) return sys_error("SO_REUSEADDR", errno);
  sockaddr_storage sa;
  socklen_t len = ep.to_sockaddr(&sa);
  if (::bind(s.fd(), reinterpret_cast<sockaddr*>(&sa), len) != 0) {
    if (bind_errno != nullptr) *bind_errno = errno;
    return sys_error("cannot bind " + ep.to_string(), errno);
  }
  if (::listen(s.fd(), backlog) != 0) return sys_error("cannot listen on " + ep.to_string(), errno);
  len = sizeof sa;
  if (getsockname(s.fd(), reinterpret_cast<sockaddr*>(&sa), &len) != 0) return sys_error("getsockname", errno);
  ep.port = Endpoint::from_sockaddr(reinterpret_cast<sockaddr*>(&sa)).port;
  return s;
}

Result<Socket> connect_until(const Endpoint& ep, Clock::time_point deadline) {
  std::minstd_rand jitter(static_cast<unsigned>(getpid()) ^
                          static_cast<unsigned>(Clock::now().time_since_epoch().count()));
  auto backoff = std::chrono::milliseconds(20);
  const auto max_backoff = std::chrono::milliseconds(1000);
  int last = 0;
  int attempts = 0;
  while (true) {
    ++attempts;
    Socket s(::socket(ep.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!s.valid()) return sys_error("socket", errno);
    sockaddr_storage sa;
    const socklen_t len = ep.to_sockaddr(&sa);
    int err = 0;
    if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&sa), len) != 0) err = errno;
    if (err == EINPROGRESS || err == EINTR) {  // EINTR: the connect goes on asynchronously
      GW_ASSIGN_OR_RETURN(const bool ready, wait_ready(s.fd(), POLLOUT, deadline));
      if (ready) {
        socklen_t elen = sizeof err;
        if (getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &elen) != 0) err = errno;
      } else {
        err = ETIMEDOUT;
      }
    }
    if (err == 0) {
      const int one = 1;
      setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return s;
    }
    last = err;
    if (!retryable_connect_error(err)) return sys_error("connect to " + ep.to_string(), err);
    const auto now = Clock::now();
    if (now >= deadline) break;
    // Sleep backoff * [0.5, 1.0), never past the deadline.
    auto pause = backoff / 2 + std::chrono::milliseconds(jitter() % static_cast<unsigned>(backoff.count() / 2 + 1));
    pause = std::min(pause, std::chrono::ceil<std::chrono::milliseconds>(deadline - now));
    std::this_thread::sleep_for(pause);
    backoff = std::min(backoff * 2, max_backoff);
  }
  return Status(Code::kTimeout, "could not connect to " + ep.to_string() + " before the deadline (" +
                                    std::to_string(attempts) + " attempts, last: " + std::strerror(last) + ")");
}

Status read_exact(int fd, void* buf, size_t n, Clock::time_point deadline) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return Status(Code::kRemote, "connection closed by the peer");
    if (errno == EINTR) continue;
    if (peer_gone(errno)) return Status(Code::kRemote, std::string("connection lost: ") + std::strerror(errno));
    if (errno != EAGAIN && errno != EWOULDBLOCK) return sys_error("recv", errno);
    GW_ASSIGN_OR_RETURN(const bool ready, wait_ready(fd, POLLIN, deadline));
    if (!ready) return Status(Code::kTimeout, "timed out waiting for data");
  }
  return Status::ok();
}

Status write_exact(int fd, const void* buf, size_t n, Clock::time_point deadline) {
  const auto* p = static_cast<const uint8_t*>(buf);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && peer_gone(errno))
      return Status(Code::kRemote, std::string("connection lost: ") + std::strerror(errno));
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return sys_error("send", errno);
    GW_ASSIGN_OR_RETURN(const bool ready, wait_ready(fd, POLLOUT, deadline));
    if (!ready) return Status(Code::kTimeout, "timed out sending");
  }
  return Status::ok();
}

std::string peer_name(int fd) {
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) return "?";
  return Endpoint::from_sockaddr(reinterpret_cast<sockaddr*>(&sa)).to_string();
}

}  // namespace gw::bootstrap
