// Checks of a call's own arguments, made in the caller's thread before anything is sent:
// sizes no buffer can have, point-to-point peers and buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "gradwire/status.hpp"
#include "gradwire/types.hpp"

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

// The compressed all-gather's arguments (nranks blocks of count elements; with_codec: the
// dtypes a codec can carry), checked by the blocking call and before a non-blocking one is
// queued.
inline Status check_allgather_compressed(const void* send, const void* recv, size_t count, int nranks, DType dtype,
                                         bool with_codec) {
  if (!collective_dtype_valid(static_cast<int>(dtype))) {
    return invalid_argument("dtype " + std::to_string(static_cast<int>(dtype)) + " is not a gw_dtype_t");
  }
  const size_t es = dtype_size(dtype);
  GW_RETURN_IF_ERROR(check_size("sendbuf", count, es, dtype_name(dtype)));
  uint64_t total = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(count), static_cast<uint64_t>(nranks), &total)) {
    return invalid_argument("recvbuf (nranks * count) is larger than any buffer");
  }
  GW_RETURN_IF_ERROR(check_size("recvbuf (nranks * count)", total, es, dtype_name(dtype)));
  if (count > 0 && send == nullptr) return invalid_argument("sendbuf is null");
  if (count > 0 && recv == nullptr) return invalid_argument("recvbuf is null");
  if (with_codec && dtype != DType::kFloat32 && dtype != DType::kFloat16 && dtype != DType::kBFloat16) {
    return unsupported(std::string("a compressed all-gather takes float32, float16 or bfloat16, not ") +
                       dtype_name(dtype) + " (pass no codec for a raw one)");
  }
  return Status::ok();
}

}  // namespace gw::comm_detail
