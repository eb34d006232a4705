// Writes a message header from the host's bytes, in stream order.
#include "kernels/header_kernel.hpp"

#include "common/cuda_check.hpp"
#include "kernels/precise_math.cuh"

namespace gw::kern {
namespace {

__global__ void write_header_kernel(HeaderBytes header, uint8_t* out, const uint64_t* kept, uint32_t index_bytes) {
  const unsigned i = threadIdx.x;
  if (i >= wire::kHeaderBytes) return;
  uint8_t b = header.bytes[i];
  if (kept != nullptr) {
    const uint64_t k = *kept;
    if (i >= wire::kKAt && i < wire::kKAt + 8) b = static_cast<uint8_t>(k >> (8 * (i - wire::kKAt)));
    const uint64_t payload = k * (index_bytes + 4);
    if (i >= wire::kPayloadBytesAt && i < wire::kPayloadBytesAt + 8) {
      b = static_cast<uint8_t>(payload >> (8 * (i - wire::kPayloadBytesAt)));
    }
  }
  out[i] = b;
}

}  // namespace

Status write_header_async(const wire::Header& header, uint8_t* out, cudaStream_t stream, const uint64_t* kept,
                          uint32_t index_bytes) {
  HeaderBytes bytes;
  wire::write_header(header, bytes.bytes);
  write_header_kernel<<<1, 64, 0, stream>>>(bytes, out, kept, index_bytes);
  return launch_status("write_header_kernel");
}

}  // namespace gw::kern
