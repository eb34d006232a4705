// C++ API for codecs: parse a spec, encode host memory into a self-describing message,
// decode any message back. The C ABI in gradwire.h is a thin shell over this.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gradwire/export.h"
#include "gradwire/status.hpp"
#include "gradwire/types.hpp"

namespace gw {

// Values match gw_codec_id_t and the codec byte of the wire header.
enum class CodecId : uint8_t {
  kNone = 0,
  kFp16 = 1,
  kBf16 = 2,
  kQsgd = 3,
  kSign = 4,
  kTopk = 5,
  kDgc = 6,
  kRandomk = 7,
};
GW_API const char* codec_name(CodecId id);

// Values match gw_decode_mode_t.
enum class DecodeMode : uint8_t { kOverwrite = 0, kAccumulate = 1, kSubtract = 2 };

// A parsed codec spec such as "qsgd:bits=4,bucket=512,ef=1".
struct GW_API CodecSpec {
  CodecId id = CodecId::kNone;
  uint32_t bits = 0;       // qsgd: 1, 2, 4 or 8
  uint32_t bucket = 0;     // qsgd, sign: elements per scale
  double ratio = 0.0;      // topk, dgc, randomk: fraction kept (0 when k is fixed)
  uint64_t k = 0;          // topk, dgc, randomk: elements kept (0 when ratio is used)
  double sample = 0.0;     // dgc: fraction of elements sampled for the threshold
  uint64_t seed = 0;       // keys the random stream with the step
  bool stochastic = true;  // qsgd: stochastic (unbiased) or nearest rounding
  bool ef = false;         // error feedback wanted by the caller's collective

  static Result<CodecSpec> parse(std::string_view text);
  // Canonical text: parse(to_string()) gives back an equal spec.
  std::string to_string() const;
  bool is_sparse() const;
  // Elements a sparse codec keeps out of n (at least 1 when n > 0, never more than n).
  uint64_t k_for(uint64_t n) const;
};

// Keys the counter-based random stream; see docs/wire-format.md, "Randomness".
struct EncodeContext {
  uint64_t step = 0;
  uint32_t rank = 0;
};

// What a message's header says, checked against its payload.
struct MessageInfo {
  CodecId codec = CodecId::kNone;
  DType dtype = DType::kFloat32;
  uint64_t count = 0;
  uint64_t nnz = 0;
  uint64_t total_bytes = 0;
};

class ErrorFeedback;
class Workspace;
namespace wire {
struct Header;
}

class GW_API Codec {
 public:
  static Result<std::unique_ptr<Codec>> create(std::string_view spec);
  static Result<std::unique_ptr<Codec>> create(const CodecSpec& spec);
  virtual ~Codec();
  Codec(const Codec&) = delete;
  Codec& operator=(const Codec&) = delete;

  const CodecSpec& spec() const { return spec_; }
  CodecId id() const { return spec_.id; }
  // Lossy codecs take float32 only; none, fp16 and bf16 take every dtype.
  virtual bool accepts(DType dtype) const;
  // Exact upper bound on encode's output for n elements (saturates at SIZE_MAX).
  virtual size_t max_encoded_bytes(size_t n, DType dtype) const = 0;

  // Encodes n elements at src into out (cap bytes); returns the bytes written.
  Result<size_t> encode(const void* src, size_t n, DType dtype, const EncodeContext& ctx, void* out, size_t cap);
  // Encodes src + ef.residual, then sets ef.residual to what the message failed to carry
  // and advances ef's step.
  Result<size_t> encode(const float* src, size_t n, const EncodeContext& ctx, ErrorFeedback& ef, void* out, size_t cap);
  // Encodes ef.residual in place as the input (it already holds g + residual), then leaves
  // in it what the message failed to carry. Used by collectives that add into the residual.
  Result<size_t> encode_accumulated(float* acc, size_t n, const EncodeContext& ctx, void* out, size_t cap);
  // acc += add, then encode_accumulated(acc): the same bytes and the same acc afterwards, in
  // fewer passes over memory where the codec folds the addition into its own first pass.
  Result<size_t> encode_adding(float* acc, const float* add, size_t n, const EncodeContext& ctx, void* out, size_t cap);

 protected:
  explicit Codec(const CodecSpec& spec);
  // Fills the codec's header fields and writes the payload; returns the payload's bytes.
  // out has room for max_encoded_bytes(n) minus the header.
  virtual Result<size_t> encode_payload(const void* src, size_t n, DType dtype, const EncodeContext& ctx,
                                        wire::Header& header, uint8_t* out) = 0;
  // encode_payload of acc + add, leaving the sum in acc. The default adds, then encodes.
  virtual Result<size_t> encode_payload_adding(float* acc, const float* add, size_t n, const EncodeContext& ctx,
                                               wire::Header& header, uint8_t* out);
  Workspace& workspace() { return *workspace_; }

 private:
  Status check_encode_args(const void* src, size_t n, DType dtype, const void* out, size_t cap) const;

  CodecSpec spec_;
  std::unique_ptr<Workspace> workspace_;
};

// Decodes a message into dst (n elements of dtype). Validates the whole message first, so
// on error dst is untouched.
GW_API Status decode(const void* msg, size_t len, void* dst, size_t n, DType dtype, DecodeMode mode);
GW_API Result<MessageInfo> inspect(const void* msg, size_t len);

}  // namespace gw
