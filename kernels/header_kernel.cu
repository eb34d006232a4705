// Writes a message header from the host's bytes, in stream order.
#include "kernels/header_kernel.hpp"

#include "kernels/cuda_check.hpp"

namespace gw::kern {
namespace {

__global__ void write_header_kernel(HeaderBytes header, uint8_t* out) {
  const unsigned i = threadIdx.x;
  if (i < wire::kHeaderBytes) out[i] = header.bytes[i];
}

}  // namespace

Status write_header_async(const wire::Header& header, uint8_t* out, cudaStream_t stream) {
  HeaderBytes bytes;
  wire::write_header(header, bytes.bytes);
  write_header_kernel<<<1, 64, 0, stream>>>(bytes, out);
  return launch_status("write_header_kernel");
}

}  // namespace gw::kern
