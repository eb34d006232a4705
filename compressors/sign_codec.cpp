// sign: one bit per element (1 = negative) and, per bucket, the mean magnitude as the
// scale: value = +-scale. The mean uses quant::fold_lanes' canonical order.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "compressors/bucketed_layout.hpp"
#include "compressors/codec_registry.hpp"
#include "compressors/element_io.hpp"
#include "compressors/payload_io.hpp"

namespace gw::detail {
namespace {

constexpr uint32_t kScaleBytes = 4;

float bucket_mean_magnitude(const float* x, uint64_t len) {
  float lanes[quant::kSumLanes] = {};
  uint64_t i = 0;
  for (; i + quant::kSumLanes <= len; i += quant::kSumLanes) {
    for (int l = 0; l < quant::kSumLanes; ++l) lanes[l] += std::fabs(x[i + l]);
  }
  for (int l = 0; i + l < len; ++l) lanes[l] += std::fabs(x[i + l]);
  return hd::div(quant::fold_lanes(lanes), static_cast<float>(len));
}

class SignCodec final : public Codec {
 public:
  explicit SignCodec(const CodecSpec& spec) : Codec(spec) {}

  size_t max_encoded_bytes(size_t n, DType) const override {
    uint64_t bytes = 0;
    if (!bucketed_payload_bytes(n, 1, spec().bucket, kScaleBytes, bytes)) return SIZE_MAX;
    return bytes + wire::kHeaderBytes;
  }

 protected:
  Result<size_t> encode_payload(const void* src, size_t n, DType, const EncodeContext&,
                                wire::Header& h, uint8_t* out) override {
    const auto* x = static_cast<const float*>(src);
    const uint32_t bucket = spec().bucket;
    h.bits = 1;
    h.bucket = bucket;
    uint64_t payload = 0;
    bucketed_payload_bytes(n, 1, bucket, kScaleBytes, payload);
    const uint64_t nb = quant::bucket_count(n, bucket);
    for (uint64_t b = 0; b < nb; ++b) {
      const uint64_t lo = b * bucket;
      store_le(out, b, bucket_mean_magnitude(x + lo, std::min<uint64_t>(bucket, n - lo)));
    }
    uint8_t* codes = out + nb * kScaleBytes;
    const uint64_t full = n / 8;
    for (uint64_t byte = 0; byte < full; ++byte) {
      uint32_t v = 0;
      for (uint32_t j = 0; j < 8; ++j) v |= quant::sign_bit(x[8 * byte + j]) << j;
      codes[byte] = static_cast<uint8_t>(v);
    }
    if (n % 8 != 0) {
      uint32_t v = 0;
      for (uint64_t i = full * 8; i < n; ++i) v |= quant::sign_bit(x[i]) << (i - full * 8);
      codes[full] = static_cast<uint8_t>(v);
    }
    return payload;
  }
};

std::unique_ptr<Codec> make_sign(const CodecSpec& spec) { return std::make_unique<SignCodec>(spec); }

Status validate_sign(const wire::Header& h, const uint8_t*, uint64_t& nnz) {
  if (h.bits != 1) return invalid_message("sign bit width " + std::to_string(h.bits) + " is not 1");
  if (h.flags != 0) return invalid_message("sign message has flags set");
  return validate_bucketed(h, kScaleBytes, nnz);
}

void apply_sign(const wire::Header& h, const uint8_t* payload, void* dst, DType, DecodeMode mode) {
  const uint64_t nb = quant::bucket_count(h.count, h.bucket);
  const uint8_t* codes = payload + nb * kScaleBytes;
  auto* d = static_cast<float*>(dst);
  for (uint64_t b = 0; b < nb; ++b) {
    const uint64_t lo = b * h.bucket;
    const uint64_t len = std::min<uint64_t>(h.bucket, h.count - lo);
    const float scale = load_le<float>(payload, b);
    apply_dense<F32>(d + lo, len, mode, [&](uint64_t i) {
      return quant::sign_value(quant::get_code(codes, lo + i, 1), scale);
    });
  }
}

}  // namespace

const CodecEntry kSignEntry{CodecId::kSign, "sign", "bucket", make_sign, validate_sign, apply_sign,
                            false};

}  // namespace gw::detail
