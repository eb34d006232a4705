// topk on the device: exactly the k largest magnitudes of compressors/topk_codec.cpp (ties to
// the lower index), by the radix select in radix_select.cu. Enqueues only.
#include <string>

#include "compressors/sparse_layout.hpp"
#include "kernels/device_codecs.hpp"
#include "kernels/precise_math.cuh"
#include "kernels/radix_select.cuh"

namespace gw::kern {

Result<uint64_t> encode_topk(const EncodeJob& job, wire::Header& header) {
  if (job.dtype != DType::kFloat32) {
    return unsupported(std::string("topk does not take ") + dtype_name(job.dtype) + " input");
  }
  const uint64_t k = job.spec->k_for(job.n);
  const SelectArray in{static_cast<const float*>(job.src), job.residual, job.n};
  GW_RETURN_IF_ERROR(with_index_type(job.n, [&](auto idx) {
    using Idx = decltype(idx);
    return select_topk<Idx>(in, k, sparse_out<Idx>(job.payload, k, job.residual), *job.scratch, job.stream);
  }));
  header.k = k;
  return detail::sparse_payload_bytes(job.n, k);
}

namespace {
Result<uint64_t> encode_topk_row(const EncodeJob& job, wire::Header& header, const uint64_t**) {
  return encode_topk(job, header);
}
}  // namespace

// Decoded by the shared index-carrying decoder (sparse_kernels.cu).
GW_REGISTER_DEVICE_CODEC(CodecId::kTopk, encode_topk_row, decode_sparse);

}  // namespace gw::kern
