// Validation and sizing of the bucketed payload that qsgd and sign share:
// [buckets x scale record][codes packed LSB first, bits per element].
#pragma once

#include <string>

#include "compressors/quant_math.hpp"
#include "compressors/wire_header.hpp"

namespace gw::detail {

// Payload bytes for n elements, or SIZE_MAX-like saturation through the bool.
inline bool bucketed_payload_bytes(uint64_t n, uint32_t bits, uint32_t bucket, uint32_t scale_bytes, uint64_t& out) {
  if (n > wire::kMaxCount || bucket == 0) return false;
  out = quant::bucket_count(n, bucket) * scale_bytes + quant::code_bytes(n, bits);
  return true;
}

inline Status validate_bucketed(const wire::Header& h, uint32_t scale_bytes, uint64_t& nnz) {
  if (h.k != 0 || h.seed != 0 || h.step != 0) {
    return invalid_message("quantized message has non-zero sparse fields");
  }
  if (h.dtype != DType::kFloat32) {
    return invalid_message(std::string("quantized message says dtype ") + dtype_name(h.dtype) +
                           "; qsgd and sign encode float32 only");
  }
  if (h.bucket == 0 || h.bucket > (1u << 24)) {
    return invalid_message("bucket size " + std::to_string(h.bucket) + " is out of range");
  }
  uint64_t expect = 0;
  bucketed_payload_bytes(h.count, h.bits, h.bucket, scale_bytes, expect);
  if (h.payload_bytes != expect) {
    return invalid_message("payload is " + std::to_string(h.payload_bytes) + " bytes, expected " +
                           std::to_string(expect));
  }
  nnz = h.count;
  return Status::ok();
}

}  // namespace gw::detail
