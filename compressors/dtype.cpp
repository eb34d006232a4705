#include "gradwire/codec.hpp"

namespace gw {

size_t dtype_size(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
  }
  return "unknown";
}

bool dtype_valid(int value) { return value >= 1 && value <= 3; }

}  // namespace gw
