// The payload of a dense message (none, fp16, bf16): every element, in one element type.
#pragma once

#include "gradwire/codec.hpp"

namespace gw::detail {

// The element type a dense message's payload is written in: half precision for fp16 and
// bf16, the input's own type for none.
inline DType dense_payload_dtype(CodecId codec, DType input) {
  switch (codec) {
    case CodecId::kFp16: return DType::kFloat16;
    case CodecId::kBf16: return DType::kBFloat16;
    default: return input;
  }
}

}  // namespace gw::detail
