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

Status write_header_async(const wire::Header& header, uint8_t* out, cudaStream_t stream);

}  // namespace gw::kern
