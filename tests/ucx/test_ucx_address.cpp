// validate_ucx_address (transport/ucx/ucx_address.hpp): real worker addresses from real UCP
// workers pass; every truncation, and hand-made addresses that break one rule each, are
// refused; and random mutations of real addresses are either refused or, when accepted, given
// to a real ucp_ep_create in a forked child without crashing it. The last one is the evidence
// that the validator is sufficient for the UCX linked here: an accepted address sits right
// before a PROT_NONE page, so a read past its end would kill the child too.
//
// UCX runs only in forked children (the address sources and the mutation receivers); the test
// process itself never creates a UCP context.
//
// Environment: GW_UCX_ADDRESS_MUTATIONS (default 300), GW_UCX_ADDRESS_SEED (default fixed),
// GW_UCX_ADDRESS_PROBE_REJECTED=1 also gives *rejected* mutations to ucp_ep_create (in
// children, stderr discarded) and counts how many of those crash UCX (informative only),
// GW_UCX_ADDRESS_CORPUS_DIR=dir writes the real addresses there as fuzzing seeds.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <gtest/gtest.h>
#include <ucp/api/ucp.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "transport/bootstrap/fd_io.hpp"
#include "transport/ucx/ucx_address.hpp"

namespace gw::transport {
namespace {

using bootstrap::read_all;
using bootstrap::write_all;

// ---- UCX in a child ------------------------------------------------------------------------

struct Variant {
  const char* name;
  const char* tls;                                          // UCX_TLS, nullptr for UCX's default
  std::vector<std::pair<const char*, const char*>> config;  // more ucp_config_modify pairs
};

const std::vector<Variant>& variants() {
  static const std::vector<Variant> v = {
      {"default", nullptr, {}},
      {"tcp", "tcp", {}},
      {"sm", "sm", {}},
      {"posix", "posix", {}},
      {"sysv", "sysv", {}},
      {"cma", "cma", {}},
      {"self", "self", {}},
      {"default-v2", nullptr, {{"ADDRESS_VERSION", "v2"}}},
      {"tcp-v2", "tcp", {{"ADDRESS_VERSION", "v2"}}},
      {"sm-v2", "sm", {{"ADDRESS_VERSION", "v2"}}},
      {"default-debuginfo", nullptr, {{"ADDRESS_DEBUG_INFO", "y"}}},
      {"default-v2-debuginfo", nullptr, {{"ADDRESS_VERSION", "v2"}, {"ADDRESS_DEBUG_INFO", "y"}}},
  };
  return v;
}

struct Ucx {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
};

// A context and worker configured as the UCX transport configures its own (features, error
// handling defaults), with the variant's transports. Only in children.
bool ucx_open(const Variant& v, Ucx* u) {
  ucp_config_t* config = nullptr;
  if (ucp_config_read(nullptr, nullptr, &config) != UCS_OK) return false;
  if (v.tls != nullptr) ucp_config_modify(config, "TLS", v.tls);
  ucp_config_modify(config, "UNIFIED_MODE", "n");  // the addresses are read in this layout
  ucp_config_modify(config, "KEEPALIVE_INTERVAL", "1s");
  ucp_config_modify(config, "MM_ERROR_HANDLING", "y");  // may fail without mm: fine
  for (const auto& [key, value] : v.config) {
    if (ucp_config_modify(config, key, value) != UCS_OK) {
      ucp_config_release(config);
      return false;
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  const ucs_status_t s = ucp_init(&params, config, &u->context);
  ucp_config_release(config);
  if (s != UCS_OK) return false;
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  return ucp_worker_create(u->context, &wp, &u->worker) == UCS_OK;
}

std::string ucx_address(const Ucx& u) {
  ucp_worker_attr_t attr{};
  attr.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS;
  if (ucp_worker_query(u.worker, &attr) != UCS_OK) return {};
  std::string a(reinterpret_cast<const char*>(attr.address), attr.address_length);
  ucp_worker_release_address(u.worker, attr.address);
  return a;
}

bool write_blob(int fd, const std::string& s) {
  const uint32_t n = static_cast<uint32_t>(s.size());
  return write_all(fd, &n, sizeof(n)) && write_all(fd, s.data(), s.size());
}

bool read_blob(int fd, std::string* s) {
  uint32_t n = 0;
  if (!read_all(fd, &n, sizeof(n)) || n > (1u << 20)) return false;
  s->resize(n);
  return read_all(fd, s->data(), n);
}

// A forked child holding a live worker (so that mutation receivers reach a real peer), which
// progresses it until the parent closes its pipe.
struct Source {
  const Variant* variant = nullptr;
  pid_t pid = -1;
  int stop_fd = -1;
  std::string address;
};

// The write ends of the live sources' stop pipes: every later child must close them, or a
// source would never see its EOF.
std::vector<int>& open_stop_fds() {
  static std::vector<int> fds;
  return fds;
}

void close_stop_fds_in_child() {
  for (int fd : open_stop_fds()) close(fd);
}

Source start_source(const Variant& v) {
  Source src;
  src.variant = &v;
  int up[2], down[2];
  if (pipe(up) != 0 || pipe(down) != 0) return src;
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(900);
    close_stop_fds_in_child();
    // UCX logs to stdout; a source warns about the unmatched hellos of its visitors.
    const int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, 1);
    close(up[0]);
    close(down[1]);
    Ucx u;
    if (!ucx_open(v, &u)) _exit(2);
    if (!write_blob(up[1], ucx_address(u))) _exit(3);
    close(up[1]);
    for (;;) {
      ucp_worker_progress(u.worker);
      pollfd p{down[0], POLLIN, 0};
      if (poll(&p, 1, 1) > 0) break;  // EOF: the parent is done
    }
    ucp_worker_destroy(u.worker);
    ucp_cleanup(u.context);
    _exit(0);
  }
  close(up[1]);
  close(down[0]);
  src.pid = pid;
  src.stop_fd = down[1];
  open_stop_fds().push_back(down[1]);
  if (pid < 0 || !read_blob(up[0], &src.address)) src.address.clear();
  close(up[0]);
  return src;
}

// Returns the source's exit code, or 128 + signal.
int stop_source(Source* src) {
  if (src->pid <= 0) return -1;
  auto& fds = open_stop_fds();
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i] == src->stop_fd) fds.erase(fds.begin() + static_cast<std::ptrdiff_t>(i));
  }
  close(src->stop_fd);
  int status = 0;
  waitpid(src->pid, &status, 0);
  src->pid = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// One real address per variant, from a child that exits right away.
const std::map<std::string, std::string>& real_addresses() {
  static const std::map<std::string, std::string> addresses = [] {
    std::map<std::string, std::string> m;
    for (const Variant& v : variants()) {
      Source s = start_source(v);
      const int rc = stop_source(&s);
      if (rc == 0 && !s.address.empty())
        m[v.name] = s.address;
      else
        std::printf("variant %s: no address (source exit %d)\n", v.name, rc);
    }
    if (const char* dir = std::getenv("GW_UCX_ADDRESS_CORPUS_DIR")) {
      for (const auto& [name, a] : m) {
        const std::string path = std::string(dir) + "/" + name + ".bin";
        if (FILE* f = std::fopen(path.c_str(), "wb")) {
          std::fwrite(a.data(), 1, a.size(), f);
          std::fclose(f);
        }
      }
    }
    return m;
  }();
  return addresses;
}

std::string hex(const std::string& s, size_t max = 256) {
  std::string out;
  char buf[4];
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    std::snprintf(buf, sizeof(buf), "%02x", static_cast<uint8_t>(s[i]));
    out += buf;
  }
  if (s.size() > max) out += "...";
  return out;
}

// ---- real addresses ------------------------------------------------------------------------

// Whether validate_ucx_address, as linked and configured here, does the full walk (UCX 1.13,
// unified mode off) rather than only the generic checks: an unknown address version tells.
bool linked_full_check() { return !validate_ucx_address("\x07", 1).is_ok(); }

TEST(UcxAddress, ChecksumIsUcxCrc16) {
  // CRC-16/X-25 check value, then the transports' checksums must be distinct.
  EXPECT_EQ(detail::ucx_tl_name_csum("123456789"), 0x906e);
  const char* names[] = {"self",     "tcp",       "posix",    "sysv",     "xpmem",     "cma",       "knem",
                         "rc_verbs", "rc_mlx5",   "dc_mlx5",  "ud_verbs", "ud_mlx5",   "cuda_copy", "cuda_ipc",
                         "gdr_copy", "rocm_copy", "rocm_ipc", "rocm_gdr", "ugni_rdma", "ugni_udt",  "ugni_smsg"};
  std::set<uint16_t> seen;
  for (const char* n : names) EXPECT_TRUE(seen.insert(detail::ucx_tl_name_csum(n)).second) << n;
}

TEST(UcxAddress, RealAddressesPass) {
  const bool full = linked_full_check();
  ASSERT_FALSE(real_addresses().empty());
  EXPECT_GE(real_addresses().size(), variants().size() - 2) << "most variants should give an address";
  for (const auto& [name, a] : real_addresses()) {
    UcxAddressInfo info;
    const Status s = validate_ucx_address(a.data(), a.size(), &info);
    EXPECT_TRUE(s.is_ok()) << name << ": " << s.to_string() << "\n" << hex(a);
    // The 1.13 parser itself, whatever UCX is linked.
    UcxAddressInfo full_info;
    const Status s13 = detail::validate_ucx_address_as(a.data(), a.size(), 1, 13, false, &full_info);
    EXPECT_TRUE(s13.is_ok()) << name << ": " << s13.to_string();
    if (!full) continue;
    EXPECT_TRUE(info.full_check);
    EXPECT_EQ(info.version, std::string(name).find("-v2") != std::string::npos ? 2u : 1u) << name;
    EXPECT_FALSE(info.entries.empty()) << name;
    std::string tls;
    for (const auto& e : info.entries) {
      EXPECT_NE(e.tl_name, nullptr) << name << ": transport checksum " << e.tl_name_csum << " not recognised";
      tls += std::string(" ") + (e.tl_name != nullptr ? e.tl_name : "?") + "(dev " + std::to_string(e.dev_addr_len) +
             ", iface " + std::to_string(e.iface_addr_len) + ")";
    }
    std::printf("%-22s %4zu bytes, v%u, %u devices:%s\n", name.c_str(), a.size(), info.version, info.devices,
                tls.c_str());
  }
}

TEST(UcxAddress, EveryTruncationIsRejected) {
  for (const auto& [name, a] : real_addresses()) {
    for (size_t n = 0; n < a.size(); ++n) {
      const Status s = detail::validate_ucx_address_as(a.data(), n, 1, 13, false, nullptr);
      EXPECT_FALSE(s.is_ok()) << name << ": prefix of " << n << " of " << a.size() << " bytes accepted";
      EXPECT_EQ(s.code(), Code::kRemote) << name;
    }
  }
}

TEST(UcxAddress, TrailingBytesAreRejected) {
  for (const auto& [name, a] : real_addresses()) {
    const std::string longer = a + std::string(1, '\0');
    const Status s = detail::validate_ucx_address_as(longer.data(), longer.size(), 1, 13, false, nullptr);
    EXPECT_FALSE(s.is_ok()) << name;
    EXPECT_NE(s.message().find("follow the last device"), std::string::npos) << s.message();
  }
}

TEST(UcxAddress, GenericChecks) {
  EXPECT_EQ(validate_ucx_address("", 0).code(), Code::kRemote);
  EXPECT_EQ(validate_ucx_address(nullptr, 0).code(), Code::kRemote);
  EXPECT_EQ(validate_ucx_address(nullptr, 5).code(), Code::kInvalidArgument);
  const std::string huge(kMaxUcxAddressBytes + 1, '\0');
  const Status s = validate_ucx_address(huge.data(), huge.size());
  EXPECT_EQ(s.code(), Code::kRemote);
  EXPECT_NE(s.message().find("larger than"), std::string::npos) << s.message();
}

TEST(UcxAddress, OtherUcxVersionsGetOnlyGenericChecks) {
  const std::string junk = "\x07junk";
  UcxAddressInfo info;
  EXPECT_TRUE(detail::validate_ucx_address_as(junk.data(), junk.size(), 1, 14, false, &info).is_ok());
  EXPECT_FALSE(info.full_check);
  EXPECT_TRUE(detail::validate_ucx_address_as(junk.data(), junk.size(), 2, 0, false, &info).is_ok());
  EXPECT_TRUE(detail::validate_ucx_address_as(junk.data(), junk.size(), 1, 13, true, &info).is_ok());  // unified
  EXPECT_FALSE(detail::validate_ucx_address_as(junk.data(), 0, 1, 14, false, &info).is_ok());
  const Status s = detail::validate_ucx_address_as(junk.data(), junk.size(), 1, 13, false, &info);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("unknown address version 7"), std::string::npos) << s.message();
}

// ---- hand-made addresses, one broken rule each ---------------------------------------------

struct SynthEntry {
  std::string tl = "self";
  std::string iface = std::string(8, '\x11');
  unsigned ep_addrs = 0;
  float v1_bandwidth = 1e9f;
  uint16_t v2_seg_units = 128;  // 8 KiB
  uint16_t v2_flags = 0x3;      // connect to iface, AM sync
};

struct SynthDevice {
  unsigned md = 0;
  bool empty = false;
  std::string dev_addr;
  int paths = -1;    // < 0: no path byte
  int sys_dev = -1;  // < 0: no system device byte
  std::vector<SynthEntry> entries = {SynthEntry{}};
};

struct Synth {
  unsigned version = 1;  // 1 or 2
  uint8_t hdr_flags = 0;
  std::string name;
  std::vector<SynthDevice> devices = {SynthDevice{}};
  bool null_resource = false;

  std::string build() const {
    std::string b;
    auto u8 = [&](unsigned v) { b.push_back(static_cast<char>(static_cast<uint8_t>(v))); };
    auto raw = [&](const void* p, size_t n) { b.append(static_cast<const char*>(p), n); };
    // A value in the low bits of a byte already pushed (flags in the high bits), extended in v2.
    auto ext = [&](unsigned high, unsigned value, unsigned mask) {
      if (version == 2 && value >= mask) {
        u8(high | mask);
        u8(value);
      } else {
        u8(high | (value & mask));
      }
    };
    if (version == 1) {
      u8(static_cast<unsigned>(hdr_flags) << 4);
    } else {
      u8(1);
      u8(hdr_flags | 0x2);  // v2 with UUID
    }
    const uint64_t uuid = 0x1234567890abcdefull;
    raw(&uuid, 8);
    if (hdr_flags & 0x4) raw(&uuid, 8);
    if (hdr_flags & 0x1) {
      u8(static_cast<unsigned>(name.size()));
      b += name;
    }
    if (null_resource) {
      u8(0xff);
      return b;
    }
    for (size_t d = 0; d < devices.size(); ++d) {
      const SynthDevice& dev = devices[d];
      ext(dev.empty ? 0x80 : 0, dev.md, version == 1 ? 0x1f : 0x7f);
      unsigned flags = d + 1 == devices.size() ? 0x80 : 0;
      if (dev.paths >= 0) flags |= 0x40;
      if (dev.sys_dev >= 0) flags |= 0x20;
      ext(flags, static_cast<unsigned>(dev.dev_addr.size()), 0x1f);
      if (dev.paths >= 0) u8(static_cast<unsigned>(dev.paths));
      if (dev.sys_dev >= 0) u8(static_cast<unsigned>(dev.sys_dev));
      b += dev.dev_addr;
      if (dev.empty) continue;
      for (size_t e = 0; e < dev.entries.size(); ++e) {
        const SynthEntry& en = dev.entries[e];
        const uint16_t csum = detail::ucx_tl_name_csum(en.tl);
        raw(&csum, 2);
        if (version == 1) {
          const float ovh = 1e-8f, lat = 1e-7f;
          const uint32_t prio = 0;
          raw(&ovh, 4);
          raw(&en.v1_bandwidth, 4);
          raw(&lat, 4);
          raw(&prio, 4);
        } else {
          u8(10);
          u8(200);
          u8(10);
          u8(0);
          raw(&en.v2_seg_units, 2);
          raw(&en.v2_flags, 2);
        }
        unsigned iflags = e + 1 == dev.entries.size() ? 0x80 : 0;
        if (en.ep_addrs > 0) iflags |= 0x40;
        ext(iflags, static_cast<unsigned>(en.iface.size()), 0x3f);
        b += en.iface;
        for (unsigned k = 0; k < en.ep_addrs; ++k) {
          u8(4);
          b += "\x01\x02\x03\x04";
          u8(k + 1 == en.ep_addrs ? 0x80u | k : k);
        }
      }
    }
    return b;
  }
};

std::string host_id() { return std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8); }

Status check(const Synth& s) {
  const std::string a = s.build();
  return detail::validate_ucx_address_as(a.data(), a.size(), 1, 13, false, nullptr);
}

void expect_rejected(const Synth& s, const std::string& words) {
  const Status st = check(s);
  EXPECT_FALSE(st.is_ok()) << "accepted; wanted an error with \"" << words << "\": " << hex(s.build());
  EXPECT_EQ(st.code(), Code::kRemote);
  EXPECT_NE(st.message().find(words), std::string::npos) << st.message();
}

TEST(UcxAddress, HandMadeAddressesPass) {
  for (unsigned version : {1u, 2u}) {
    Synth s;
    s.version = version;
    EXPECT_TRUE(check(s).is_ok()) << version << ": " << check(s).to_string();
    s.hdr_flags = 0x1 | 0x4;  // name and client id
    s.name = "host:1234";
    s.devices[0].paths = 2;
    s.devices[0].sys_dev = 3;
    s.devices.insert(s.devices.begin(), SynthDevice{1, true, "", -1, -1, {}});
    SynthDevice sm{2, false, host_id(), -1, -1, {}};
    SynthEntry posix{"posix", std::string("\x05\x00\x00\x00\x00\x00\x00\x40", 8)};  // shm_open id
    SynthEntry cma{"cma", std::string("\x39\x30\x00\x00", 4)};
    SynthEntry unknown{"no_such_tl", ""};
    unknown.ep_addrs = 6;
    sm.entries = {posix, cma, unknown};
    s.devices.push_back(sm);
    SynthDevice tcp{3, false, std::string("\x00\x02\x0a\x00\x00\x01", 6), -1, -1, {{"tcp", "\x30\x39"}}};
    s.devices.push_back(tcp);
    EXPECT_TRUE(check(s).is_ok()) << version << ": " << check(s).to_string() << "\n" << hex(s.build());
  }
  Synth v2;
  v2.version = 2;
  v2.devices[0].md = 63;                          // the highest md index UCX allows
  v2.devices[0].dev_addr = std::string(40, 'x');  // extended device length
  v2.devices[0].entries[0].iface = std::string(100, 'y');
  v2.devices[0].sys_dev = 0xff;
  EXPECT_TRUE(check(v2).is_ok()) << check(v2).to_string();
}

TEST(UcxAddress, HandMadeAddressesBreakingOneRule) {
  Synth s;
  s.null_resource = true;
  expect_rejected(s, "lists no devices");

  s = Synth{};
  s.devices[0].empty = true;
  expect_rejected(s, "lists no transports");

  s = Synth{};
  s.version = 2;
  s.devices[0].md = 64;
  expect_rejected(s, "memory domain index 64 is out of range");

  s = Synth{};
  s.devices.assign(64, SynthDevice{0, true, "", -1, -1, {}});
  s.devices.push_back(SynthDevice{});
  expect_rejected(s, "more than 64 devices");
  s.devices.erase(s.devices.begin());
  EXPECT_TRUE(check(s).is_ok()) << check(s).to_string();  // 64 devices is fine

  s = Synth{};
  s.devices[0].entries.assign(129, SynthEntry{"no_such_tl", ""});
  expect_rejected(s, "more than 128 transport entries");
  s.devices[0].entries.pop_back();
  EXPECT_TRUE(check(s).is_ok()) << check(s).to_string();

  s = Synth{};
  s.devices[0].entries[0].ep_addrs = 7;
  expect_rejected(s, "more than 6 endpoint addresses");

  s = Synth{};
  s.devices[0].sys_dev = 64;
  expect_rejected(s, "system device 64 is out of range");

  s = Synth{};
  s.devices[0].entries[0].iface = "\x01\x02\x03\x04";
  expect_rejected(s, "self interface address of 4 bytes is shorter than the 8 bytes");

  s = Synth{};
  s.devices[0].entries[0] = SynthEntry{"tcp", "\x30\x39"};
  expect_rejected(s, "tcp device address of 0 bytes");
  s.devices[0].dev_addr = std::string("\x00\x0a\x01\x02\x03\x04", 6);  // AF_INET6 with 4 bytes
  expect_rejected(s, "IPv6");
  s.devices[0].dev_addr = std::string("\x01\x02", 2) + host_id();  // loopback
  EXPECT_TRUE(check(s).is_ok()) << check(s).to_string();
  s.devices[0].dev_addr = std::string("\x01\x02\x01\x02\x03\x04\x05\x06\x07\x88", 10);  // namespace bit
  expect_rejected(s, "namespace");
  s.devices[0].dev_addr = std::string("\x00\x02\x0a\x00\x00\x01", 6);
  s.devices[0].entries[0].iface = "\x30";
  expect_rejected(s, "TCP port");

  s = Synth{};
  s.devices[0].dev_addr = host_id();
  s.devices[0].entries[0] = SynthEntry{"posix", std::string(8, '\0')};  // file mode, no directory
  expect_rejected(s, "not NUL-terminated");
  s.devices[0].entries[0].iface = std::string(8, '\0') + "/tmp" + std::string(1, '\0');
  EXPECT_TRUE(check(s).is_ok()) << check(s).to_string();
  s.devices[0].entries[0] = SynthEntry{"cma", std::string("\x39\x30\x00\x80", 4)};  // PID namespace bit
  expect_rejected(s, "cma interface address of 4 bytes");
  s.devices[0].dev_addr = "";
  s.devices[0].entries[0] = SynthEntry{"sysv", std::string(8, '\0')};
  expect_rejected(s, "sysv device address of 0 bytes");

  s = Synth{};
  s.devices[0].dev_addr = std::string("\x30\x01\x00", 3);  // IB, both subnet flags
  s.devices[0].entries[0] = SynthEntry{"ud_verbs", "\x01\x02\x03"};
  expect_rejected(s, "both subnet flags");
  s.devices[0].dev_addr = std::string("\x40\x01\x00", 3);  // IB with interface id but no room
  expect_rejected(s, "IB address");
  s.devices[0].dev_addr = std::string("\x40\x01\x00", 3) + host_id();
  EXPECT_TRUE(check(s).is_ok()) << check(s).to_string();
  s.devices[0].entries[0] = SynthEntry{"dc_mlx5", "\x01\x02\x03"};
  expect_rejected(s, "dc_mlx5 interface address of 3 bytes");

  s = Synth{};
  s.devices[0].entries[0].v1_bandwidth = std::numeric_limits<float>::quiet_NaN();
  expect_rejected(s, "non-finite");
  s.devices[0].entries[0].v1_bandwidth = 0;
  expect_rejected(s, "zero bandwidth");

  s = Synth{};
  s.version = 2;
  s.devices[0].entries[0].v2_seg_units = 1;
  expect_rejected(s, "segment size of 64 bytes");
  s.devices[0].entries[0].v2_flags = 0x1;  // no AM: the segment size does not matter
  EXPECT_TRUE(check(s).is_ok()) << check(s).to_string();

  s = Synth{};
  s.devices[0].dev_addr = std::string(10, 'd');
  std::string a = s.build();
  const size_t cut = a.size() - 20;  // inside the device address... or later: just past the end
  const Status st = detail::validate_ucx_address_as(a.data(), cut, 1, 13, false, nullptr);
  EXPECT_NE(st.message().find("runs past the end"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("worker address of " + std::to_string(cut) + " bytes: device 0"), std::string::npos)
      << st.message();
}

// ---- mutations of real addresses, given to ucp_ep_create in children ----------------------

enum ChildExit : int {
  kRejected = 10,
  kEpCreated = 11,
  kEpCreateFailed = 12,
  kNoUcx = 13,
};

// Copies `a` to the very end of a page followed by a PROT_NONE page, so that UCX reading past
// the end of the address faults.
const void* guarded_copy(const std::string& a) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t span = (a.size() + page - 1) / page * page;
  void* m = mmap(nullptr, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  uint8_t* base = static_cast<uint8_t*>(m);
  mprotect(base + span, page, PROT_NONE);
  uint8_t* p = base + span - a.size();
  std::memcpy(p, a.data(), a.size());
  return p;
}

void ignore_ep_error(void*, ucp_ep_h, ucs_status_t) {}

// In a child: validate, then (if accepted, or if `probe` says so) connect with ucp_ep_create
// as the UCX transport does, progress a little, force-close, and exit with what happened.
[[noreturn]] void mutation_child(const Variant& receiver, const std::string& a, bool probe) {
  alarm(30);
  const rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  const bool ok = validate_ucx_address(a.data(), a.size()).is_ok();
  if (!ok && !probe) _exit(kRejected);
  const void* addr = guarded_copy(a);
  Ucx u;
  if (addr == nullptr || !ucx_open(receiver, &u)) _exit(kNoUcx);
  ucp_ep_params_t ep{};
  ep.field_mask =
      UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = static_cast<const ucp_address_t*>(addr);
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = &ignore_ep_error;
  ep.err_handler.arg = nullptr;
  ucp_ep_h h = nullptr;
  const ucs_status_t s = ucp_ep_create(u.worker, &ep, &h);
  void* send = nullptr;
  if (s == UCS_OK) {  // and a first message, as connect() sends its hello
    static const char kHello[] = "hello";
    ucp_request_param_t sp{};
    send = ucp_tag_send_nbx(h, kHello, sizeof(kHello), 0x5eed, &sp);
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  while (std::chrono::steady_clock::now() < until) ucp_worker_progress(u.worker);
  if (UCS_PTR_IS_PTR(send)) ucp_request_cancel(u.worker, send);
  if (s == UCS_OK) {
    ucp_request_param_t close{};
    close.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    close.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* req = ucp_ep_close_nbx(h, &close);
    if (UCS_PTR_IS_PTR(req)) {
      while (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_worker_progress(u.worker);
      ucp_request_free(req);
    }
  }
  if (UCS_PTR_IS_PTR(send)) {
    while (ucp_request_check_status(send) == UCS_INPROGRESS) ucp_worker_progress(u.worker);
    ucp_request_free(send);
  }
  ucp_worker_destroy(u.worker);
  ucp_cleanup(u.context);
  _exit(!ok ? kRejected : s == UCS_OK ? kEpCreated : kEpCreateFailed);
}

struct Mutation {
  size_t source = 0;
  std::string bytes;
  std::string how;
};

std::vector<Mutation> make_mutations(const std::vector<Source>& sources, size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  std::vector<Mutation> out;
  for (size_t i = 0; i < count; ++i) {
    Mutation m;
    m.source = i % sources.size();
    std::string a = sources[m.source].address;
    UcxAddressInfo info;
    (void)detail::validate_ucx_address_as(a.data(), a.size(), 1, 13, false, &info);
    const std::vector<uint32_t>& structural = info.structural_offsets;
    const size_t kind = pick(100);
    char how[96];
    if (kind < 45 && !structural.empty()) {  // a bit of a header/flag/length byte
      const size_t at = structural[pick(structural.size())];
      const unsigned bit = static_cast<unsigned>(pick(8));
      a[at] = static_cast<char>(static_cast<uint8_t>(a[at]) ^ (1u << bit));
      std::snprintf(how, sizeof(how), "flip bit %u of structural byte %zu", bit, at);
    } else if (kind < 60 && !structural.empty()) {  // a structural byte set to a random value
      const size_t at = structural[pick(structural.size())];
      const uint8_t v = static_cast<uint8_t>(rng());
      a[at] = static_cast<char>(v);
      std::snprintf(how, sizeof(how), "set structural byte %zu to 0x%02x", at, v);
    } else if (kind < 80) {  // a bit anywhere
      const size_t at = pick(a.size());
      const unsigned bit = static_cast<unsigned>(pick(8));
      a[at] = static_cast<char>(static_cast<uint8_t>(a[at]) ^ (1u << bit));
      std::snprintf(how, sizeof(how), "flip bit %u of byte %zu", bit, at);
    } else if (kind < 90) {  // a byte anywhere set to a boundary value
      static const uint8_t kValues[] = {0x00, 0xff, 0x1f, 0x3f, 0x7f, 0x80, 0x40, 0x20};
      const size_t at = pick(a.size());
      const uint8_t v = kValues[pick(sizeof(kValues))];
      a[at] = static_cast<char>(v);
      std::snprintf(how, sizeof(how), "set byte %zu to 0x%02x", at, v);
    } else if (kind < 95) {  // a byte removed
      const size_t at = pick(a.size());
      a.erase(at, 1);
      std::snprintf(how, sizeof(how), "remove byte %zu", at);
    } else {  // a byte repeated
      const size_t at = pick(a.size());
      a.insert(at, 1, a[at]);
      std::snprintf(how, sizeof(how), "repeat byte %zu", at);
    }
    m.bytes = std::move(a);
    m.how = how;
    out.push_back(std::move(m));
  }
  return out;
}

size_t env_size(const char* name, size_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? static_cast<size_t>(std::strtoull(v, nullptr, 0)) : fallback;
}

TEST(UcxAddress, MutationsAreRejectedOrSurviveUcpEpCreate) {
  if (!linked_full_check()) {
    GTEST_SKIP() << "validate_ucx_address does only the generic checks here (UCX " << ucp_get_version_string()
                 << ", or UCX_UNIFIED_MODE on)";
  }

  const size_t count = env_size("GW_UCX_ADDRESS_MUTATIONS", 300);
  const uint64_t seed = env_size("GW_UCX_ADDRESS_SEED", 20240611);
  const bool probe = env_size("GW_UCX_ADDRESS_PROBE_REJECTED", 0) != 0;
  const char* kSources[] = {"default", "tcp", "sm", "self", "default-v2", "sm-v2", "default-debuginfo"};

  signal(SIGPIPE, SIG_IGN);
  std::vector<Source> sources;
  for (const char* name : kSources) {
    for (const Variant& v : variants()) {
      if (std::string(v.name) != name) continue;
      Source s = start_source(v);
      if (s.address.empty()) {
        stop_source(&s);
        ADD_FAILURE() << "no address from source " << name;
      } else {
        sources.push_back(std::move(s));
      }
    }
  }
  ASSERT_FALSE(sources.empty());

  // Controls: the unmutated addresses must get through the same path and connect.
  std::vector<Mutation> work;
  for (size_t i = 0; i < sources.size(); ++i) work.push_back({i, sources[i].address, "unmutated"});
  const size_t controls = work.size();
  for (Mutation& m : make_mutations(sources, count, seed)) work.push_back(std::move(m));

  struct Running {
    pid_t pid;
    size_t index;
    FILE* err;
  };
  std::vector<Running> running;
  std::map<int, size_t> outcomes;  // exit code or 128 + signal
  size_t accepted = 0, rejected = 0, created = 0, create_failed = 0, crashed = 0;
  size_t probe_crashed = 0;
  std::string crash_reports;
  const size_t kParallel = 4;

  auto reap = [&](bool block) {
    for (size_t r = 0; r < running.size();) {
      int status = 0;
      const pid_t got = waitpid(running[r].pid, &status, block ? 0 : WNOHANG);
      if (got != running[r].pid) {
        ++r;
        continue;
      }
      const Mutation& m = work[running[r].index];
      const bool is_control = running[r].index < controls;
      const bool signalled = WIFSIGNALED(status);
      const int code = signalled ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
      ++outcomes[code];
      const bool validator_ok = validate_ucx_address(m.bytes.data(), m.bytes.size()).is_ok();
      if (is_control) {
        // A self-only receiver cannot connect with peer error handling (UCX: "no peer failure
        // handler"), so that control fails cleanly; the others connect.
        const bool self_only = std::string(sources[m.source].variant->name) == "self";
        EXPECT_EQ(code, self_only ? kEpCreateFailed : kEpCreated)
            << "control " << sources[m.source].variant->name << " (exit " << code << ")";
      } else if (validator_ok) {
        ++accepted;
        if (code == kEpCreated) ++created;
        if (code == kEpCreateFailed) ++create_failed;
      } else {
        ++rejected;
      }
      if ((signalled || (code != kRejected && code != kEpCreated && code != kEpCreateFailed)) && validator_ok &&
          !is_control) {
        ++crashed;
        std::string err;
        if (running[r].err != nullptr) {
          std::rewind(running[r].err);
          char buf[4096];
          const size_t n = std::fread(buf, 1, sizeof(buf), running[r].err);
          err.assign(buf, n);
        }
        crash_reports += "source " + std::string(sources[m.source].variant->name) + ", " + m.how + ": exit " +
                         std::to_string(code) + "\n  " + hex(m.bytes) + "\n  stderr: " + err + "\n";
      } else if (signalled && !validator_ok) {
        ++probe_crashed;
      }
      if (running[r].err != nullptr) std::fclose(running[r].err);
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(r));
    }
  };

  const auto started = std::chrono::steady_clock::now();
  for (size_t i = 0; i < work.size(); ++i) {
    while (running.size() >= kParallel) {
      reap(false);
      if (running.size() >= kParallel) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    FILE* err = std::tmpfile();
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close_stop_fds_in_child();
      if (err != nullptr) {  // UCX logs to stdout
        dup2(fileno(err), 1);
        dup2(fileno(err), 2);
      }
      mutation_child(*sources[work[i].source].variant, work[i].bytes, probe && i >= controls);
    }
    running.push_back({pid, i, err});
  }
  while (!running.empty()) reap(true);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  for (Source& s : sources) {
    const int rc = stop_source(&s);
    EXPECT_EQ(rc, 0) << "source " << s.variant->name << " ended with " << rc << " (128+ is a signal)";
  }

  const size_t mutations = work.size() - controls;
  std::printf(
      "%zu mutations (+%zu controls) in %.1f s: %zu rejected by the validator, %zu accepted "
      "(ucp_ep_create succeeded %zu, failed cleanly %zu), %zu accepted ones crashed\n",
      mutations, controls, secs, rejected, accepted, created, create_failed, crashed);
  if (probe) std::printf("probe: %zu rejected mutations crashed UCX when given to it anyway\n", probe_crashed);
  std::string codes;
  for (const auto& [code, n] : outcomes) codes += " " + std::to_string(code) + ":" + std::to_string(n);
  std::printf("child exits (10 rejected, 11 created, 12 create failed, 13 no UCX, 128+ signal):%s\n", codes.c_str());
  EXPECT_EQ(crashed, 0u) << crash_reports;
  EXPECT_EQ(outcomes.count(kNoUcx), 0u);
}

}  // namespace
}  // namespace gw::transport
