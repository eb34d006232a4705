// The 56-byte header of a device message, written by a one-block kernel so that it lands in
// stream order with the payload (no pageable-memory copy, no wait).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "compressors/wire_header.hpp"
#include "gradwire/status.hpp"

namespace gw::kern {

struct HeaderBytes {
  uint8_t bytes[wire::kHeaderBytes];
};

// Writes header at out. With kept set (device memory, a sparse message whose count only the
// device knows: dgc), k is *kept and payload_bytes is *kept * (index_bytes + 4) instead of
// the host's values; the message's length is then known once the header is.
Status write_header_async(const wire::Header& header, uint8_t* out, cudaStream_t stream, const uint64_t* kept = nullptr,
                          uint32_t index_bytes = 0);

}  // namespace gw::kern
