#include "gradwire/types.hpp"

namespace gw {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
    case DType::kBFloat16: return 2;
    case DType::kFloat64:
    case DType::kInt64: return 8;
    case DType::kInt8:
    case DType::kUInt8: return 1;
    case DType::kFloat32:
    case DType::kInt32: return 4;
  }
  return 4;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat64: return "float64";
    case DType::kInt8: return "int8";
    case DType::kUInt8: return "uint8";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
  }
  return "unknown";
}

bool dtype_valid(int value) { return value >= 1 && value <= 3; }

bool collective_dtype_valid(int value) { return value >= 1 && value <= 8; }

const char* red_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
  }
  return "unknown";
}

}  // namespace gw
