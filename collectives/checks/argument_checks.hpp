// Checks of a call's own arguments, made in the caller's thread before anything is sent:
// sizes no buffer can have, point-to-point peers and buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "gradwire/status.hpp"

namespace gw::comm_detail {

// No buffer is larger than this (2^48 bytes: 256 TiB, more than an x86-64 or arm64 process can
// map). Sizes above it, including those whose byte count would wrap, are refused up front:
// nothing is sent and the communicator stays usable.
inline constexpr uint64_t kMaxBufferBytes = uint64_t{1} << 48;

inline Status check_size(const char* what, uint64_t count, uint64_t elem_size, const char* unit) {
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(count, elem_size, &bytes) || bytes > kMaxBufferBytes) {
    return invalid_argument(std::string(what) + " of " + std::to_string(count) + " " + unit +
                            " is larger than any buffer (at most " + std::to_string(kMaxBufferBytes) + " bytes)");
  }
  return Status::ok();
}

// Arguments of isend/irecv that need no progress thread to check.
inline Status check_p2p_args(const void* buf, size_t bytes, int peer, int nranks) {
  if (peer < 0 || peer >= nranks) {
    return invalid_argument("peer " + std::to_string(peer) + " is not a rank of this communicator (0 to " +
                            std::to_string(nranks - 1) + ")");
  }
  GW_RETURN_IF_ERROR(check_size("bytes", bytes, 1, "bytes"));
  if (bytes > 0 && buf == nullptr) return invalid_argument("buf is null");
  return Status::ok();
}

}  // namespace gw::comm_detail
