// sign: one bit per element (1 = negative) and, per bucket, the mean magnitude as the
// scale: value = +-scale. The mean uses quant::fold_lanes' canonical order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <type_traits>

#include "compressors/bucketed_layout.hpp"
#include "compressors/codec_registry.hpp"
#include "compressors/element_io.hpp"
#include "compressors/host_simd.hpp"
#include "compressors/payload_io.hpp"
#include "compressors/spec_params.hpp"

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
  Result<size_t> encode_payload(const void* src, size_t n, DType, const EncodeContext&, wire::Header& h,
                                uint8_t* out) override {
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

template <DecodeMode kMode>
GW_INLINE_HOT void apply_value(float& d, float v) {
  if (kMode == DecodeMode::kOverwrite) d = v;
  if (kMode == DecodeMode::kAccumulate) d = d + v;
  if (kMode == DecodeMode::kSubtract) d = d - v;
}

// Decodes every bucket: value = quant::sign_value(bit, scale), applied per kMode. Bits are
// read 32 at a time where a bucket covers whole words (vectorizable); the partial bytes at
// a bucket's ends go through quant::get_code.
template <DecodeMode kMode>
GW_INLINE_HOT void decode_buckets(uint64_t count, uint32_t bucket, const uint8_t* payload, float* d) {
  const uint64_t nb = quant::bucket_count(count, bucket);
  const uint8_t* codes = payload + nb * kScaleBytes;
  for (uint64_t b = 0; b < nb; ++b) {
    const uint64_t lo = b * bucket;
    const uint64_t hi = std::min<uint64_t>(lo + bucket, count);
    const float scale = load_le<float>(payload, b);
    const uint32_t scale_bits = hd::float_bits(scale);
    uint64_t i = lo;
    for (; i < hi && i % 8 != 0; ++i) {
      apply_value<kMode>(d[i], quant::sign_value(quant::get_code(codes, i, 1), scale));
    }
    for (; i + 32 <= hi; i += 32) {
      uint32_t word;
      std::memcpy(&word, codes + i / 8, sizeof word);
      for (uint32_t j = 0; j < 32; ++j) {
        // quant::sign_value as a sign-bit flip (what negation is), which vectorizes on SSE2.
        apply_value<kMode>(d[i + j], hd::bits_float(scale_bits ^ (((word >> j) & 1u) << 31)));
      }
    }
    for (; i < hi; ++i) {
      apply_value<kMode>(d[i], quant::sign_value(quant::get_code(codes, i, 1), scale));
    }
  }
}

template <class Fn>
GW_INLINE_HOT void with_mode(DecodeMode mode, Fn&& fn) {
  switch (mode) {
    case DecodeMode::kOverwrite: fn(std::integral_constant<DecodeMode, DecodeMode::kOverwrite>{}); break;
    case DecodeMode::kAccumulate: fn(std::integral_constant<DecodeMode, DecodeMode::kAccumulate>{}); break;
    case DecodeMode::kSubtract: fn(std::integral_constant<DecodeMode, DecodeMode::kSubtract>{}); break;
  }
}

// One build per instruction set (see host_simd.hpp); all give the same values.
#define GW_SIGN_DECODE_BODY \
  with_mode(mode, [&](auto km) { decode_buckets<decltype(km)::value>(count, bucket, payload, d); })

void decode_all_baseline(uint64_t count, uint32_t bucket, const uint8_t* payload, float* d, DecodeMode mode) {
  GW_SIGN_DECODE_BODY;
}

#if defined(GW_HOST_X86_SIMD)
GW_TARGET_AVX2 void decode_all_avx2(uint64_t count, uint32_t bucket, const uint8_t* payload, float* d,
                                    DecodeMode mode) {
  GW_SIGN_DECODE_BODY;
}

GW_TARGET_AVX512 void decode_all_avx512(uint64_t count, uint32_t bucket, const uint8_t* payload, float* d,
                                        DecodeMode mode) {
  GW_SIGN_DECODE_BODY;
}
#endif

void apply_sign(const wire::Header& h, const uint8_t* payload, void* dst, DType, DecodeMode mode) {
  auto* d = static_cast<float*>(dst);
#if defined(GW_HOST_X86_SIMD)
  switch (host_simd()) {
    case HostSimd::kAvx512: return decode_all_avx512(h.count, h.bucket, payload, d, mode);
    case HostSimd::kAvx2: return decode_all_avx2(h.count, h.bucket, payload, d, mode);
    case HostSimd::kBaseline: break;
  }
#endif
  decode_all_baseline(h.count, h.bucket, payload, d, mode);
}

// Sign sends one bit per element, always.
Status finish_sign(CodecSpec& spec) {
  spec.bits = 1;
  return Status::ok();
}

constexpr SpecParam kSignParams[] = {kBucketParam};
const char* const kSignBench[] = {"sign", nullptr};

}  // namespace

const CodecEntry kSignEntry{CodecId::kSign, "sign",
                            kSignParams,    std::size(kSignParams),
                            finish_sign,    kCapLossy | kCapErrorFeedback,
                            make_sign,      validate_sign,
                            apply_sign,     kSignBench};
GW_REGISTER_CODEC(kSignEntry);

}  // namespace gw::detail
