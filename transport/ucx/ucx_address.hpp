// Validation of a UCP worker address received from a peer, before UCX sees it.
//
// ucp_ep_create() takes a worker address without a length and trusts every count and length
// inside it: a malformed address (a buggy or hostile peer) makes UCX read past the end of the
// buffer or abort on an assertion, in every rank that connects to it. validate_ucx_address()
// walks the address the way UCX 1.13's unpacker does, bounded by the length actually received,
// and refuses what UCX would not survive. The format, and what is checked, is described at the
// top of ucx_address.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gradwire/status.hpp"

namespace gw::transport {

// Larger worker addresses are refused whatever the UCX version (real ones are well under 1 KiB
// even with many devices).
constexpr size_t kMaxUcxAddressBytes = 64 * 1024;

// What a successful validation found (for logs and tests).
struct UcxAddressInfo {
  bool full_check = false;  // false: only the generic checks applied (see ucx_address.cpp)
  unsigned version = 0;     // address format: 1 or 2 (UCX's UCP_OBJECT_VERSION_V1/V2 + 1)
  unsigned devices = 0;
  struct Entry {
    uint16_t tl_name_csum = 0;
    const char* tl_name = nullptr;  // a UCX 1.13 transport with this checksum, or nullptr
    unsigned device = 0;
    unsigned dev_addr_len = 0;
    unsigned iface_addr_len = 0;
    unsigned ep_addrs = 0;
  };
  std::vector<Entry> entries;
  // Offsets of the bytes that carry the header, flags, counts and lengths (not the opaque
  // payloads), for tests that mutate them.
  std::vector<uint32_t> structural_offsets;
};

// OK when UCX (the version linked at run time) can take this address in ucp_ep_create()
// without reading past `len` bytes or aborting; otherwise a Code::kRemote error naming the
// problem, e.g. "worker address of 97 bytes: device 2: device address of 18 bytes runs past
// the end (9 bytes left)". data == nullptr with len > 0 is Code::kInvalidArgument.
Status validate_ucx_address(const void* data, size_t len, UcxAddressInfo* info = nullptr);

namespace detail {

// The same, as if UCX major.minor were linked and its context had UNIFIED_MODE as given
// (tests use this to reach the fallback paths).
Status validate_ucx_address_as(const void* data, size_t len, unsigned ucx_major, unsigned ucx_minor, bool unified_mode,
                               UcxAddressInfo* info);

// UCX's transport name checksum (CRC-16-CCITT of the name, as ucs_crc16_string computes it).
uint16_t ucx_tl_name_csum(const std::string& tl_name);

}  // namespace detail
}  // namespace gw::transport
