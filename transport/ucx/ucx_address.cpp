// Validation of UCP worker addresses received from peers (see ucx_address.hpp).
//
// ============================================================================================
// The UCX 1.13 worker address, as this file understands it
// ============================================================================================
// Written against UCX 1.13 (v1.13.x: src/ucp/wireup/address.c, ucp_address_unpack, and what
// ucp_ep_create does with its result: wireup/select.c, wireup/wireup.c, core/ucp_ep.c and the
// UCT transports' iface_is_reachable and ep_create). A UCX release with a different address
// format or different consumers must get this file reviewed and kUcxMajor/kUcxMinor updated;
// until then, on any other UCX major.minor (checked at run time with ucp_get_version), only
// the generic checks below apply, with one info line in the log.
//
// All multi-byte values are in the sender's byte order (UCX assumes peers of the same
// endianness); byte positions below are in order of appearance.
//
// Header
//   byte 0, low nibble: address version. 0 = "v1" (the 1.13 default), 1 = "v2"
//     (UCX_ADDRESS_VERSION=v2). UCX 1.13 aborts (assert) on any other value.
//   v1: the high nibble of byte 0 holds the header flags.  v2: byte 1 holds them.
//   header flags: 0x1 debug info (a worker name follows), 0x2 worker UUID, 0x4 client id,
//     0x8 AM-only (no effect on the layout). Other bits are ignored by UCX.
//   UUID, 8 bytes: always present in v1 (ucp_ep_create unpacks with the UUID flag, and a v1
//     address always has it), in v2 only with header flag 0x2.
//   client id, 8 bytes: with header flag 0x4.
//   worker name: with header flag 0x1: one length byte N, then N bytes (not NUL-terminated).
//   Then either one byte 0xff (UCP_NULL_RESOURCE: no devices) or the device list.
//
// Device (repeated until one carries the LAST flag)
//   md byte: 0x80 = device without transports ("empty"); the rest is the memory domain
//     index: v1 low 5 bits (0x40/0x20 are legacy MD capability flags), v2 low 7 bits, and in
//     v2 the value 0x7f means "the index is in the next byte".
//   device length byte: 0x80 LAST device, 0x40 a path-count byte follows, 0x20 a system
//     device byte follows; low 5 bits the device address length, in v2 0x1f meaning "the
//     length is in the next byte".
//   [path count byte] [system device byte] device address (that many bytes).
//   Unless the device is empty, its transport entries follow.
//
// Transport entry (repeated until one carries the LAST flag)
//   transport name checksum, 2 bytes (CRC-16 of the UCT transport name, e.g. "tcp").
//   interface attributes: v1 16 bytes (float overhead, float bandwidth, float latency,
//     u32 priority + capability flags); v2 8 bytes (fp8 overhead, fp8 bandwidth, fp8
//     latency, u8 priority, u16 segment size in units of 64 bytes, u16 capability flags).
//     (A 1-byte resource index would follow with UCP_ADDRESS_PACK_FLAG_TL_RSC_IDX, which
//     ucp_ep_create does not use.)
//   interface length byte: 0x80 LAST entry of the device, 0x40 endpoint addresses follow; low
//     6 bits the interface address length, in v2 0x3f meaning "in the next byte".
//   interface address (that many bytes).
//   With 0x40: endpoint addresses, each = length byte, that many bytes, lane byte (0x80 LAST
//     endpoint address, low 6 bits the lane). Worker addresses never carry them, but UCX
//     parses them (at most UCP_MAX_LANES = 6 per entry) if the flag is there.
//
// Nothing carries the total length: ucp_address_unpack walks until the LAST flags and trusts
// every length on the way.
//
// UCX_UNIFIED_MODE=y changes the layout as *read by the receiver*: the interface attributes
// become a 5-byte resource index + latency and the lengths are taken from the receiver's own
// interfaces, so they cannot be checked from the bytes alone. With unified mode on (read once
// from UCX's configuration, environment and config file), only the generic checks apply.
//
// ============================================================================================
// What is checked
// ============================================================================================
// Generic (any UCX version): the address is not empty and at most kMaxUcxAddressBytes.
//
// Full (UCX 1.13, unified mode off): the walk above, with every count and length checked
// against the bytes left before it is used, and:
//  - address version 0 or 1 (UCX asserts otherwise);
//  - at most 64 devices: UCX indexes 64-bit device bitmaps and 128-entry per-device counters
//    with the device index (which counts empty devices too);
//  - md index below 64 (UCP_MAX_MDS): wireup.c stores into a 64-entry array at that index;
//  - system device below 64 (UCP_MAX_SYS_DEVICES) or 0xff (unknown): UCX uses it as a bit
//    index in 64-bit maps and as an index into 64-entry tables;
//  - at most 128 transport entries (UCP_MAX_RESOURCES) and 6 endpoint addresses per entry
//    (UCP_MAX_LANES) (UCX fails cleanly there, refused here with a clearer message);
//  - v1 attributes: finite floats, overhead and latency not negative, bandwidth not zero;
//  - v2 attributes: an entry that offers AM (flag "AM sync") has a segment size of at least
//    1 KiB: ucp_ep_create sizes its AM bcopy limit by it and aborts (assert) when the packed
//    rkey does not fit; real transports advertise several KiB;
//  - no bytes after the last device; at least one transport entry (an address without any
//    cannot be connected to; UCX would only say "unreachable");
//  - for the transports that UCX 1.13 knows (recognised by the name checksum), the device and
//    interface addresses are at least as long as what that transport's iface_is_reachable and
//    ep_create read (a zero length becomes a NULL pointer that several of them dereference):
//      self: iface 8 (an id).  tcp: device 2 (flags, family) + 4 (IPv4) / 16 (IPv6), or, if
//      the loopback flag is set, the 8-byte host id (+8 with the namespace bit); iface 2 (port).
//      posix, sysv, xpmem, cma, knem: device = host id as above. posix: iface 8 (segment id),
//      +8 when the segment id says a PID namespace follows, and a NUL-terminated directory
//      when the id names neither shm_open nor procfs. sysv: iface 8. xpmem: iface 16.
//      cma: iface 4 (pid), 16 when the pid carries the namespace bit.
//      rc_verbs, rc_mlx5, dc_mlx5, ud_verbs, ud_mlx5: device = an IB address whose length
//      follows from its flag byte (and not both subnet flags: UCX asserts); dc_mlx5 iface 5,
//      ud_* iface 3. cuda_copy, gdr_copy, rocm_copy, rocm_gdr: iface 8. cuda_ipc, rocm_ipc:
//      device 8, iface 4. ugni_*: device 4, iface 4.
//    Entries of other transports are only read by a local transport of the same name, which
//    UCX 1.13 does not have, so their payloads are opaque here.
//
// Not checked (cannot be, from the bytes): whether the contents are true. A peer that names a
// shared memory segment, pid or IP address of something else gets UCX to try it; what UCX
// then does is up to UCX (the mutation test in tests/ucx/test_ucx_address.cpp runs real
// ucp_ep_create calls on accepted mutations to see that they do not crash).
#include "transport/ucx/ucx_address.hpp"

#include <strings.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "common/log.hpp"

namespace gw::transport {
namespace {

// The UCX release this parser was written for.
constexpr unsigned kUcxMajor = 1;
constexpr unsigned kUcxMinor = 13;

// Header.
constexpr uint8_t kVersionMask = 0x0f;
constexpr unsigned kVersionV1 = 0;
constexpr unsigned kVersionV2 = 1;
constexpr uint8_t kHdrDebugInfo = 0x01;
constexpr uint8_t kHdrUuid = 0x02;
constexpr uint8_t kHdrClientId = 0x04;
constexpr uint8_t kNullResource = 0xff;

// Device.
constexpr uint8_t kMdEmptyDevice = 0x80;
constexpr uint8_t kMdMaskV1 = 0x1f;
constexpr uint8_t kMdMaskV2 = 0x7f;
constexpr uint8_t kFlagLast = 0x80;
constexpr uint8_t kDevNumPaths = 0x40;
constexpr uint8_t kDevSysDevice = 0x20;
constexpr uint8_t kDevLenMask = 0x1f;

// Transport entry.
constexpr uint8_t kIfaceHasEpAddr = 0x40;
constexpr uint8_t kIfaceLenMask = 0x3f;
constexpr size_t kAttrSizeV1 = 16;
constexpr size_t kAttrSizeV2 = 8;
constexpr uint16_t kV2FlagAmSync = 0x02;  // UCP_ADDR_IFACE_FLAG_AM_SYNC
constexpr size_t kV2SegSizeUnit = 64;
constexpr size_t kMinAmSegBytes = 1024;

// UCX 1.13 limits.
constexpr unsigned kMaxDevices = 64;
constexpr unsigned kMaxMdIndex = 64;     // UCP_MAX_MDS
constexpr unsigned kMaxSysDevices = 64;  // UCP_MAX_SYS_DEVICES
constexpr uint8_t kSysDeviceUnknown = 0xff;
constexpr unsigned kMaxEntries = 128;  // UCP_MAX_RESOURCES
constexpr unsigned kMaxEpAddrs = 6;    // UCP_MAX_LANES

// An unaligned little-endian field (UCX packs host-endian; every host gradwire runs on is
// little-endian).
template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// ---- transport-specific address checks -----------------------------------------------------

enum class Tl {
  kSelf,
  kTcp,
  kPosix,
  kSysv,
  kXpmem,
  kCma,
  kKnem,
  kRcVerbs,
  kRcMlx5,
  kDcMlx5,
  kUdVerbs,
  kUdMlx5,
  kCudaCopy,
  kCudaIpc,
  kGdrCopy,
  kRocmCopy,
  kRocmIpc,
  kRocmGdr,
  kUgniRdma,
  kUgniUdt,
  kUgniSmsg,
};

struct KnownTl {
  const char* name;
  Tl tl;
  uint16_t csum;
};

const std::vector<KnownTl>& known_tls() {
  static const std::vector<KnownTl> tls = [] {
    const std::pair<const char*, Tl> names[] = {
        {"self", Tl::kSelf},          {"tcp", Tl::kTcp},          {"posix", Tl::kPosix},
        {"sysv", Tl::kSysv},          {"xpmem", Tl::kXpmem},      {"cma", Tl::kCma},
        {"knem", Tl::kKnem},          {"rc_verbs", Tl::kRcVerbs}, {"rc_mlx5", Tl::kRcMlx5},
        {"dc_mlx5", Tl::kDcMlx5},     {"ud_verbs", Tl::kUdVerbs}, {"ud_mlx5", Tl::kUdMlx5},
        {"cuda_copy", Tl::kCudaCopy}, {"cuda_ipc", Tl::kCudaIpc}, {"gdr_copy", Tl::kGdrCopy},
        {"rocm_copy", Tl::kRocmCopy}, {"rocm_ipc", Tl::kRocmIpc}, {"rocm_gdr", Tl::kRocmGdr},
        {"ugni_rdma", Tl::kUgniRdma}, {"ugni_udt", Tl::kUgniUdt}, {"ugni_smsg", Tl::kUgniSmsg},
    };
    std::vector<KnownTl> v;
    for (const auto& [name, tl] : names) v.push_back({name, tl, detail::ucx_tl_name_csum(name)});
    return v;
  }();
  return tls;
}

const KnownTl* find_tl(uint16_t csum) {
  for (const KnownTl& k : known_tls()) {
    if (k.csum == csum) return &k;
  }
  return nullptr;
}

std::string too_short(const char* what, size_t have, size_t need, const char* reason) {
  return std::string(what) + " address of " + std::to_string(have) + " bytes is shorter than the " +
         std::to_string(need) + " bytes UCX reads (" + reason + ")";
}

// UCT's "local address" of shared memory transports (and of TCP on loopback): a 64-bit host
// id whose top bit says that an 8-byte namespace id follows.
std::string check_host_id(const char* what, const uint8_t* p, size_t n) {
  if (n < 8) return too_short(what, n, 8, "host id");
  if ((load<uint64_t>(p) >> 63) != 0 && n < 16) return too_short(what, n, 16, "host id and namespace");
  return {};
}

// UCT's InfiniBand device address: a flags byte, then fields that the flags announce.
std::string check_ib_device(const uint8_t* p, size_t n) {
  if (n < 1) return too_short("device", n, 1, "IB address flags");
  const uint8_t f = p[0];
  constexpr uint8_t kGidIndex = 0x01, kPathMtu = 0x02, kPkey = 0x04, kEth = 0x08, kSubnet16 = 0x10, kSubnet64 = 0x20,
                    kIfId = 0x40;
  size_t need = 1;
  if (f & kEth) {
    need += 16;  // raw GID
  } else {
    need += 2;  // LID
    if ((f & kSubnet16) && (f & kSubnet64)) return "IB device address has both subnet flags (UCX asserts)";
    if (f & kIfId) need += 8;
    if (f & kSubnet16) need += 2;
    if (f & kSubnet64) need += 8;
  }
  if (f & kPathMtu) need += 1;
  if (f & kGidIndex) need += 1;
  if (f & kPkey) need += 2;
  if (n < need) return too_short("device", n, need, "IB address with these flags");
  return {};
}

std::string check_posix_iface(const uint8_t* p, size_t n) {
  if (n < 8) return too_short("interface", n, 8, "segment id");
  const uint64_t seg_id = load<uint64_t>(p);
  constexpr uint64_t kProcfs = 1ull << 63, kShmOpen = 1ull << 62, kPidNs = 1ull << 60;
  if ((seg_id & kPidNs) && n < 16) return too_short("interface", n, 16, "segment id and PID namespace");
  if (!(seg_id & (kProcfs | kShmOpen)) && std::memchr(p + 8, 0, n - 8) == nullptr) {
    return "posix interface address names a backing directory that is not NUL-terminated";
  }
  return {};
}

std::string check_tl_addresses(Tl tl, const uint8_t* dev, size_t dev_len, const uint8_t* iface, size_t iface_len) {
  std::string e;
  auto min_iface = [&](size_t need, const char* reason) {
    return iface_len < need ? too_short("interface", iface_len, need, reason) : std::string();
  };
  auto min_dev = [&](size_t need, const char* reason) {
    return dev_len < need ? too_short("device", dev_len, need, reason) : std::string();
  };
  switch (tl) {
    case Tl::kSelf: return min_iface(8, "self id");
    case Tl::kTcp: {
      if (dev_len < 2) return too_short("device", dev_len, 2, "TCP flags and address family");
      constexpr uint8_t kLoopback = 0x01;
      if (dev[0] & kLoopback) {
        e = check_host_id("device", dev + 2, dev_len - 2);
        if (!e.empty()) return "TCP loopback " + e;
      } else if (dev[1] == AF_INET) {
        if (dev_len < 6) return too_short("device", dev_len, 6, "TCP IPv4 address");
      } else if (dev[1] == AF_INET6) {
        if (dev_len < 18) return too_short("device", dev_len, 18, "TCP IPv6 address");
      }
      return min_iface(2, "TCP port");
    }
    case Tl::kPosix:
      e = check_host_id("device", dev, dev_len);
      return e.empty() ? check_posix_iface(iface, iface_len) : e;
    case Tl::kSysv: e = check_host_id("device", dev, dev_len); return e.empty() ? min_iface(8, "segment id") : e;
    case Tl::kXpmem:
      e = check_host_id("device", dev, dev_len);
      return e.empty() ? min_iface(16, "segment id and xpmem segment") : e;
    case Tl::kCma:
      e = check_host_id("device", dev, dev_len);
      if (!e.empty()) return e;
      if (iface_len < 4) return too_short("interface", iface_len, 4, "pid");
      if ((load<uint32_t>(iface) >> 31) != 0) return min_iface(16, "pid and PID namespace");
      return {};
    case Tl::kKnem: return check_host_id("device", dev, dev_len);
    case Tl::kRcVerbs:
    case Tl::kRcMlx5: return check_ib_device(dev, dev_len);
    case Tl::kDcMlx5:
      e = check_ib_device(dev, dev_len);
      return e.empty() ? min_iface(5, "DC QP number, MR id and flags") : e;
    case Tl::kUdVerbs:
    case Tl::kUdMlx5: e = check_ib_device(dev, dev_len); return e.empty() ? min_iface(3, "UD QP number") : e;
    case Tl::kCudaCopy:
    case Tl::kGdrCopy:
    case Tl::kRocmCopy:
    case Tl::kRocmGdr: return min_iface(8, "interface id");
    case Tl::kCudaIpc:
    case Tl::kRocmIpc: e = min_dev(8, "host id"); return e.empty() ? min_iface(4, "pid") : e;
    case Tl::kUgniRdma:
    case Tl::kUgniUdt:
    case Tl::kUgniSmsg: e = min_dev(4, "NIC address"); return e.empty() ? min_iface(4, "domain id") : e;
  }
  return {};
}

// ---- the walk ------------------------------------------------------------------------------

class Walker {
 public:
  Walker(const uint8_t* data, size_t len, UcxAddressInfo* info) : p_(data), len_(len), info_(info) {}

  Status run() {
    GW_RETURN_IF_ERROR(header());
    if (left() < 1) return fail("the device list (offset " + std::to_string(pos_) + ") is past the end");
    if (p_[pos_] == kNullResource) {
      mark(pos_);
      return fail("lists no devices (UCX could not connect to it)");
    }
    bool last_device = false;
    while (!last_device) GW_RETURN_IF_ERROR(device(&last_device));
    if (entries_ == 0) return fail("lists no transports (UCX could not connect to it)");
    if (pos_ != len_) {
      return fail(std::to_string(len_ - pos_) + " bytes follow the last device (at offset " + std::to_string(pos_) +
                  ")");
    }
    if (info_ != nullptr) {
      info_->version = version_ + 1;
      info_->devices = devices_;
    }
    return Status::ok();
  }

 private:
  Status fail(const std::string& what) const {
    return Status(Code::kRemote, "worker address of " + std::to_string(len_) + " bytes: " + where_ + what);
  }

  size_t left() const { return len_ - pos_; }

  void mark(size_t offset) {
    if (info_ != nullptr) info_->structural_offsets.push_back(static_cast<uint32_t>(offset));
  }

  // Consumes one control byte.
  Status take_byte(const char* what, uint8_t* out) {
    if (left() < 1) return fail(std::string(what) + " (offset " + std::to_string(pos_) + ") is past the end");
    mark(pos_);
    *out = p_[pos_++];
    return Status::ok();
  }

  // Consumes n payload bytes.
  Status take(size_t n, const char* what, const uint8_t** out) {
    if (n > left()) {
      return fail(std::string(what) + " of " + std::to_string(n) + " bytes at offset " + std::to_string(pos_) +
                  " runs past the end (" + std::to_string(left()) + " bytes left)");
    }
    *out = p_ + pos_;
    pos_ += n;
    return Status::ok();
  }

  // A value in the low bits of a control byte; in v2, the all-ones value means "in the next
  // byte" (UCX's byte-extended encoding).
  Status extended(uint8_t first, uint8_t mask, const char* what, unsigned* out) {
    unsigned v = first & mask;
    if (version_ == kVersionV2 && v == mask) {
      uint8_t b = 0;
      GW_RETURN_IF_ERROR(take_byte(what, &b));
      v = b;
    }
    *out = v;
    return Status::ok();
  }

  Status header() {
    uint8_t h = 0;
    GW_RETURN_IF_ERROR(take_byte("header", &h));
    version_ = h & kVersionMask;
    uint8_t flags = 0;
    if (version_ == kVersionV1) {
      flags = static_cast<uint8_t>(h >> 4);
    } else if (version_ == kVersionV2) {
      GW_RETURN_IF_ERROR(take_byte("header flags", &flags));
    } else {
      return fail("unknown address version " + std::to_string(version_) + " (UCX " + std::to_string(kUcxMajor) + "." +
                  std::to_string(kUcxMinor) + " knows 0 and 1)");
    }
    const uint8_t* unused = nullptr;
    if (version_ == kVersionV1 || (flags & kHdrUuid)) GW_RETURN_IF_ERROR(take(8, "worker UUID", &unused));
    if (flags & kHdrClientId) GW_RETURN_IF_ERROR(take(8, "client id", &unused));
    if (flags & kHdrDebugInfo) {
      uint8_t n = 0;
      GW_RETURN_IF_ERROR(take_byte("worker name length", &n));
      GW_RETURN_IF_ERROR(take(n, "worker name", &unused));
    }
    return Status::ok();
  }

  Status device(bool* last_device) {
    const unsigned dev = devices_++;
    where_ = "device " + std::to_string(dev) + ": ";
    if (dev >= kMaxDevices) {
      return fail("more than " + std::to_string(kMaxDevices) + " devices (UCX keeps device indices in 64-bit maps)");
    }
    uint8_t b = 0;
    GW_RETURN_IF_ERROR(take_byte("memory domain byte", &b));
    const bool empty = (b & kMdEmptyDevice) != 0;
    unsigned md = 0;
    GW_RETURN_IF_ERROR(extended(b, version_ == kVersionV1 ? kMdMaskV1 : kMdMaskV2, "memory domain index", &md));
    if (md >= kMaxMdIndex) {
      return fail("memory domain index " + std::to_string(md) + " is out of range (UCX has at most " +
                  std::to_string(kMaxMdIndex) + ")");
    }
    GW_RETURN_IF_ERROR(take_byte("device length byte", &b));
    *last_device = (b & kFlagLast) != 0;
    const bool has_paths = (b & kDevNumPaths) != 0, has_sys_dev = (b & kDevSysDevice) != 0;
    unsigned dev_len = 0;
    GW_RETURN_IF_ERROR(extended(b, kDevLenMask, "device address length", &dev_len));
    if (has_paths) GW_RETURN_IF_ERROR(take_byte("path count", &b));
    if (has_sys_dev) {
      GW_RETURN_IF_ERROR(take_byte("system device", &b));
      if (b != kSysDeviceUnknown && b >= kMaxSysDevices) {
        return fail("system device " + std::to_string(b) + " is out of range (UCX has at most " +
                    std::to_string(kMaxSysDevices) + ")");
      }
    }
    const uint8_t* dev_addr = nullptr;
    GW_RETURN_IF_ERROR(take(dev_len, "device address", &dev_addr));
    if (empty) return Status::ok();
    bool last_entry = false;
    for (unsigned e = 0; !last_entry; ++e) {
      GW_RETURN_IF_ERROR(entry(dev, e, dev_addr, dev_len, &last_entry));
    }
    return Status::ok();
  }

  Status entry(unsigned dev, unsigned index, const uint8_t* dev_addr, unsigned dev_len, bool* last_entry) {
    where_ = "device " + std::to_string(dev) + ", transport entry " + std::to_string(index) + ": ";
    if (entries_ >= kMaxEntries) {
      return fail("more than " + std::to_string(kMaxEntries) + " transport entries (UCX's limit)");
    }
    ++entries_;
    const size_t csum_at = pos_;
    const uint8_t* p = nullptr;
    GW_RETURN_IF_ERROR(take(2, "transport name checksum", &p));
    mark(csum_at);
    mark(csum_at + 1);
    const uint16_t csum = load<uint16_t>(p);
    const size_t attr_at = pos_;
    GW_RETURN_IF_ERROR(take(version_ == kVersionV1 ? kAttrSizeV1 : kAttrSizeV2, "interface attributes", &p));
    GW_RETURN_IF_ERROR(version_ == kVersionV1 ? attrs_v1(p) : attrs_v2(p, attr_at));
    uint8_t b = 0;
    GW_RETURN_IF_ERROR(take_byte("interface length byte", &b));
    *last_entry = (b & kFlagLast) != 0;
    const bool has_ep = (b & kIfaceHasEpAddr) != 0;
    unsigned iface_len = 0;
    GW_RETURN_IF_ERROR(extended(b, kIfaceLenMask, "interface address length", &iface_len));
    const uint8_t* iface_addr = nullptr;
    GW_RETURN_IF_ERROR(take(iface_len, "interface address", &iface_addr));
    unsigned eps = 0;
    for (bool last_ep = !has_ep; !last_ep; ++eps) {
      if (eps >= kMaxEpAddrs) {
        return fail("more than " + std::to_string(kMaxEpAddrs) + " endpoint addresses (UCX's limit)");
      }
      uint8_t ep_len = 0;
      GW_RETURN_IF_ERROR(take_byte("endpoint address length", &ep_len));
      GW_RETURN_IF_ERROR(take(ep_len, "endpoint address", &p));
      GW_RETURN_IF_ERROR(take_byte("endpoint lane byte", &b));
      last_ep = (b & kFlagLast) != 0;
    }
    const KnownTl* tl = find_tl(csum);
    if (tl != nullptr) {
      const std::string e = check_tl_addresses(tl->tl, dev_addr, dev_len, iface_addr, iface_len);
      if (!e.empty()) return fail(std::string(tl->name) + " " + e);
    }
    if (info_ != nullptr) {
      info_->entries.push_back({csum, tl != nullptr ? tl->name : nullptr, dev, dev_len, iface_len, eps});
    }
    return Status::ok();
  }

  Status attrs_v1(const uint8_t* p) {
    const float overhead = load<float>(p), bandwidth = load<float>(p + 4), latency = load<float>(p + 8);
    if (!std::isfinite(overhead) || !std::isfinite(bandwidth) || !std::isfinite(latency)) {
      return fail("interface attributes hold a non-finite number");
    }
    if (overhead < 0 || latency < 0) return fail("interface attributes hold a negative overhead or latency");
    if (bandwidth == 0) return fail("interface attributes hold a zero bandwidth");
    return Status::ok();
  }

  Status attrs_v2(const uint8_t* p, size_t at) {
    const size_t seg_bytes = static_cast<size_t>(load<uint16_t>(p + 4)) * kV2SegSizeUnit;
    const uint16_t flags = load<uint16_t>(p + 6);
    for (size_t i = 4; i < 8; ++i) mark(at + i);
    if ((flags & kV2FlagAmSync) && seg_bytes < kMinAmSegBytes) {
      return fail("offers active messages with a segment size of " + std::to_string(seg_bytes) +
                  " bytes (UCX aborts below the size of a packed rkey; at least " + std::to_string(kMinAmSegBytes) +
                  " is required)");
    }
    return Status::ok();
  }

  const uint8_t* p_;
  size_t len_;
  UcxAddressInfo* info_;
  size_t pos_ = 0;
  unsigned version_ = 0;
  unsigned devices_ = 0;
  unsigned entries_ = 0;
  std::string where_;
};

// UNIFIED_MODE as UCX itself would read it (environment and config file), once.
bool ucx_unified_mode() {
  static const bool unified = [] {
    ucp_config_t* config = nullptr;
    if (ucp_config_read(nullptr, nullptr, &config) != UCS_OK) return false;
    char* text = nullptr;
    size_t size = 0;
    bool on = false;
    FILE* f = open_memstream(&text, &size);
    if (f != nullptr) {
      ucp_config_print(config, f, nullptr, UCS_CONFIG_PRINT_CONFIG);
      std::fclose(f);
      const char* key = std::strstr(text, "UNIFIED_MODE=");
      if (key != nullptr) {
        const char* v = key + std::strlen("UNIFIED_MODE=");
        on = (*v == 'y' || *v == 'Y' || *v == '1');
      }
      std::free(text);
    }
    ucp_config_release(config);
    return on;
  }();
  return unified;
}

}  // namespace

namespace detail {

uint16_t ucx_tl_name_csum(const std::string& tl_name) {
  // CRC-16-CCITT, reflected polynomial 0x8408, initial value 0xffff, final complement.
  uint16_t crc = 0xffff;
  for (const char c : tl_name) {
    crc = static_cast<uint16_t>(crc ^ static_cast<uint8_t>(c));
    for (int bit = 0; bit < 8; ++bit) {
      crc = static_cast<uint16_t>((crc & 1u) ? ((crc >> 1) ^ 0x8408u) : (crc >> 1));
    }
  }
  return static_cast<uint16_t>(~crc);
}

Status validate_ucx_address_as(const void* data, size_t len, unsigned ucx_major, unsigned ucx_minor, bool unified_mode,
                               UcxAddressInfo* info) {
  if (info != nullptr) *info = UcxAddressInfo{};
  if (len == 0) return Status(Code::kRemote, "worker address is empty");
  if (data == nullptr) return invalid_argument("worker address: null data with length " + std::to_string(len));
  if (len > kMaxUcxAddressBytes) {
    return Status(Code::kRemote, "worker address of " + std::to_string(len) + " bytes is larger than the " +
                                     std::to_string(kMaxUcxAddressBytes) + " accepted");
  }
  if (ucx_major != kUcxMajor || ucx_minor != kUcxMinor || unified_mode) return Status::ok();
  if (info != nullptr) info->full_check = true;
  return Walker(static_cast<const uint8_t*>(data), len, info).run();
}

}  // namespace detail

Status validate_ucx_address(const void* data, size_t len, UcxAddressInfo* info) {
  static unsigned major = 0, minor = 0;
  static std::once_flag version_once;
  std::call_once(version_once, [] {
    unsigned release = 0;
    ucp_get_version(&major, &minor, &release);
  });
  const bool known = major == kUcxMajor && minor == kUcxMinor;
  const bool unified = known && ucx_unified_mode();
  static std::atomic<bool> logged{false};
  if ((!known || unified) && !logged.exchange(true)) {
    if (!known) {
      GW_INFO(kTransport,
              "ucx: worker addresses from peers get only generic checks: their format was studied for UCX %u.%u, "
              "this is UCX %u.%u",
              kUcxMajor, kUcxMinor, major, minor);
    } else {
      GW_INFO(kTransport,
              "ucx: worker addresses from peers get only generic checks: UCX_UNIFIED_MODE is on, and then "
              "their lengths come from the local interfaces");
    }
  }
  return detail::validate_ucx_address_as(data, len, major, minor, unified, info);
}

}  // namespace gw::transport
