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

// Whether a dense encode rounds stochastically: fp16 and bf16 with rounding=stochastic. It is
// the sender's choice alone; the message is an ordinary fp16 or bf16 payload. (none takes no
// rounding key; CodecSpec::stochastic's own default is qsgd's.) Element i rounds with word i
// of the stream (spec.seed, step, rank); input already in the payload type is copied.
inline bool dense_stochastic(const CodecSpec& spec) {
  return (spec.id == CodecId::kFp16 || spec.id == CodecId::kBf16) && spec.stochastic;
}

}  // namespace gw::detail
