// The payload of index-carrying sparse messages (topk, dgc): k indices, strictly increasing,
// 4 bytes each when count <= 2^32 and 8 bytes otherwise, then k fp32 values.
#pragma once

#include <string>

#include "compressors/element_io.hpp"
#include "compressors/payload_io.hpp"
#include "compressors/wire_header.hpp"

namespace gw::detail {

inline uint32_t index_bytes(uint64_t n) { return n <= (uint64_t{1} << 32) ? 4 : 8; }

inline uint64_t sparse_payload_bytes(uint64_t n, uint64_t k) { return k * (index_bytes(n) + sizeof(float)); }

inline uint64_t load_index(const uint8_t* payload, uint64_t i, uint32_t width) {
  return width == 4 ? load_le<uint32_t>(payload, i) : load_le<uint64_t>(payload, i);
}

// Everything validate_sparse checks except the indices themselves (which the device path
// checks on the GPU, kernels/sparse_kernels.cu).
inline Status validate_sparse_fields(const wire::Header& h) {
  if (h.bits != 0 || h.bucket != 0 || h.seed != 0 || h.step != 0 || h.flags != 0) {
    return invalid_message("sparse message has quantizer or random-stream fields set");
  }
  if (h.dtype != DType::kFloat32) return invalid_message("sparse message must carry float32");
  if (h.k > h.count) {
    return invalid_message("k = " + std::to_string(h.k) + " exceeds the element count " + std::to_string(h.count));
  }
  if (h.payload_bytes != sparse_payload_bytes(h.count, h.k)) {
    return invalid_message("payload is " + std::to_string(h.payload_bytes) + " bytes, expected " +
                           std::to_string(sparse_payload_bytes(h.count, h.k)) + " for k = " + std::to_string(h.k));
  }
  return Status::ok();
}

inline Status validate_sparse(const wire::Header& h, const uint8_t* payload, uint64_t& nnz) {
  GW_RETURN_IF_ERROR(validate_sparse_fields(h));
  const uint32_t width = index_bytes(h.count);
  uint64_t prev = 0;
  for (uint64_t i = 0; i < h.k; ++i) {
    const uint64_t idx = load_index(payload, i, width);
    if (idx >= h.count) {
      return invalid_message("index " + std::to_string(idx) + " at position " + std::to_string(i) +
                             " is out of range (count " + std::to_string(h.count) + ")");
    }
    if (i > 0 && idx <= prev) {
      return invalid_message("indices are not strictly increasing at position " + std::to_string(i));
    }
    prev = idx;
  }
  nnz = h.k;
  return Status::ok();
}

// Zeroes dst on overwrite, then applies the k (index, value) pairs.
inline void apply_sparse(const wire::Header& h, const uint8_t* payload, void* dst, DecodeMode mode) {
  auto* d = static_cast<float*>(dst);
  if (mode == DecodeMode::kOverwrite && h.count > 0) std::memset(d, 0, h.count * sizeof(float));
  const uint32_t width = index_bytes(h.count);
  const uint8_t* values = payload + h.k * width;
  for (uint64_t i = 0; i < h.k; ++i) {
    const uint64_t idx = load_index(payload, i, width);
    const float v = load_le<float>(values, i);
    switch (mode) {
      case DecodeMode::kOverwrite: d[idx] = v; break;
      case DecodeMode::kAccumulate: d[idx] += v; break;
      case DecodeMode::kSubtract: d[idx] -= v; break;
    }
  }
}

}  // namespace gw::detail
