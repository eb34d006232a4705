// Unique ids: a random 128-bit token plus the root's address, and the root started behind them.
#include "transport/bootstrap/unique_id.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/log.hpp"
#include "transport/bootstrap/frames.hpp"
#include "transport/bootstrap/root_server.hpp"

namespace gw::bootstrap {
namespace {

constexpr int kBacklog = 4096;

Status urandom_bytes(uint8_t* out, size_t n) {
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status(Code::kSystem, std::string("cannot open /dev/urandom: ") + std::strerror(errno));
  Socket guard(fd);  // closes it
  while (n > 0) {
    const ssize_t r = ::read(fd, out, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      return Status(Code::kSystem, std::string("cannot read /dev/urandom: ") + std::strerror(r < 0 ? errno : EIO));
    out += r;
    n -= static_cast<size_t>(r);
  }
  return Status::ok();
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

// RootOptions::address, else GW_SOCKET_ADDR, else GW_SOCKET_IFNAME's address, else the first
// non-loopback IPv4 interface, else 127.0.0.1.
Result<Endpoint> root_address(const RootOptions& o) {
  if (!o.address.empty()) {
    auto r = resolve_host(o.address, o.port);
    if (!r.is_ok()) return r.status().with_context("RootOptions::address");
    return r;
  }
  if (const char* a = env("GW_SOCKET_ADDR")) {
    auto r = resolve_host(a, o.port);
    if (!r.is_ok()) return r.status().with_context("GW_SOCKET_ADDR");
    return r;
  }
  if (const char* i = env("GW_SOCKET_IFNAME")) {
    auto r = interface_address(i);
    if (!r.is_ok()) return r.status().with_context("GW_SOCKET_IFNAME");
    r->port = o.port;
    return r;
  }
  auto any = interface_address("");
  if (any.is_ok()) {
    any->port = o.port;
    return any;
  }
  GW_INFO(kBootstrap, "bootstrap: no non-loopback IPv4 interface is up; the root listens on 127.0.0.1");
  return Endpoint::loopback_v4(o.port);
}

}  // namespace

Status random_bytes(uint8_t* out, size_t n) {
  while (n > 0) {
    const ssize_t r = getrandom(out, n, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == ENOSYS) return urandom_bytes(out, n);
      return Status(Code::kSystem, std::string("getrandom: ") + std::strerror(errno));
    }
    out += r;
    n -= static_cast<size_t>(r);
  }
  return Status::ok();
}

UniqueId make_unique_id(const Endpoint& root, const uint8_t token[16]) {
  UniqueId id{};
  std::memcpy(id.bytes + id_layout::kMagic, id_layout::kMagicBytes, 4);
  id.bytes[id_layout::kVersion] = id_layout::kVersionValue;
  id.bytes[id_layout::kFamily] = root.family == AF_INET6 ? 6 : 4;
  frames::put_u16(id.bytes + id_layout::kPort, root.port);
  std::memcpy(id.bytes + id_layout::kAddress, root.addr, root.family == AF_INET6 ? 16 : 4);
  std::memcpy(id.bytes + id_layout::kToken, token, 16);
  return id;
}

Endpoint unique_id_endpoint(const UniqueId& id) {
  Endpoint ep;
  ep.family = id.bytes[id_layout::kFamily] == 6 ? AF_INET6 : AF_INET;
  std::memcpy(ep.addr, id.bytes + id_layout::kAddress, ep.family == AF_INET6 ? 16 : 4);
  ep.port = frames::get_u16(id.bytes + id_layout::kPort);
  return ep;
}

Result<UniqueId> create_unique_id(const RootOptions& options) {
  if (options.timeout.count() <= 0) {
    return invalid_argument("RootOptions::timeout must be positive, not " + std::to_string(options.timeout.count()) +
                            " ms");
  }
  GW_ASSIGN_OR_RETURN(Endpoint ep, root_address(options));
  if (ep.is_wildcard()) {
    return invalid_argument("the rendezvous root needs a concrete address to advertise, not " + ep.host());
  }
  auto listener = listen_on(ep, kBacklog);
  if (!listener.is_ok()) return listener.status().with_context("rendezvous root");
  uint8_t token[16];
  GW_RETURN_IF_ERROR(random_bytes(token, sizeof token));
  const UniqueId id = make_unique_id(ep, token);
  GW_RETURN_IF_ERROR(start_root_server(std::move(listener).value(), ep, token, options.timeout));
  GW_INFO(kBootstrap, "bootstrap: rendezvous root listening on %s", ep.to_string().c_str());
  return id;
}

Status validate_unique_id(const UniqueId& id) {
  const uint8_t* b = id.bytes;
  if (std::memcmp(b + id_layout::kMagic, id_layout::kMagicBytes, 4) != 0) {
    return invalid_argument("unique id has a bad magic: it did not come from create_unique_id/gw_get_unique_id");
  }
  if (b[id_layout::kVersion] != id_layout::kVersionValue) {
    return invalid_argument("unique id version " + std::to_string(b[id_layout::kVersion]) +
                            " is not supported (expected " + std::to_string(id_layout::kVersionValue) + ")");
  }
  const uint8_t family = b[id_layout::kFamily];
  if (family != 4 && family != 6) {
    return invalid_argument("unique id address family " + std::to_string(family) + " is neither 4 nor 6");
  }
  if (frames::get_u16(b + id_layout::kPort) == 0) return invalid_argument("unique id has port 0");
  const size_t addr_len = family == 6 ? 16 : 4;
  auto zero = [](const uint8_t* p, size_t n) { return std::all_of(p, p + n, [](uint8_t x) { return x == 0; }); };
  if (zero(b + id_layout::kAddress, addr_len)) return invalid_argument("unique id has no root address");
  if (!zero(b + id_layout::kAddress + addr_len, 16 - addr_len) ||
      !zero(b + id_layout::kEnd, kUniqueIdBytes - id_layout::kEnd)) {
    return invalid_argument("unique id has non-zero bytes where the layout has none (a corrupted id?)");
  }
  if (zero(b + id_layout::kToken, 16)) return invalid_argument("unique id has an all-zero token");
  return Status::ok();
}

}  // namespace gw::bootstrap
