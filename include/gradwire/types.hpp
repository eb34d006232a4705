// The element types and reduction operators every layer shares (codecs, transports,
// collectives), apart from the codec and communicator APIs that use them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gradwire/export.h"

namespace gw {

// Values match gw_dtype_t. Codecs and the wire format carry the first three; the dense
// collectives carry all of them.
enum class DType : uint8_t {
  kFloat32 = 1,
  kFloat16 = 2,
  kBFloat16 = 3,
  kFloat64 = 4,
  kInt8 = 5,
  kUInt8 = 6,
  kInt32 = 7,
  kInt64 = 8,
};
GW_API size_t dtype_size(DType dtype);
GW_API const char* dtype_name(DType dtype);
// Whether value is a dtype codecs take (float32, float16, bfloat16).
GW_API bool dtype_valid(int value);
// Whether value is any gw_dtype_t (the dense collectives take them all).
GW_API bool collective_dtype_valid(int value);

// Values match gw_red_op_t.
enum class ReduceOp : uint8_t { kSum = 0, kAvg = 1, kProd = 2, kMin = 3, kMax = 4 };
GW_API const char* red_op_name(ReduceOp op);

}  // namespace gw
