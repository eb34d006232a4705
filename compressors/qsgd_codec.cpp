// qsgd: per bucket, min and unit as fp32; each element a bits-wide code q with
// value = min + q * unit, rounded stochastically (unbiased) or to nearest.
#include <algorithm>
#include <cstring>

#include "compressors/bucketed_layout.hpp"
#include "compressors/codec_registry.hpp"
#include "compressors/element_io.hpp"
#include "compressors/payload_io.hpp"
#include "compressors/philox.hpp"
#include "compressors/workspace.hpp"

namespace gw::detail {
namespace {

constexpr uint32_t kScaleBytes = 8;  // min, unit
constexpr uint64_t kRandomTile = 4096;

class QsgdCodec final : public Codec {
 public:
  explicit QsgdCodec(const CodecSpec& spec) : Codec(spec) {}

  size_t max_encoded_bytes(size_t n, DType) const override {
    uint64_t bytes = 0;
    if (!bucketed_payload_bytes(n, spec().bits, spec().bucket, kScaleBytes, bytes)) return SIZE_MAX;
    return bytes + wire::kHeaderBytes;
  }

 protected:
  Result<size_t> encode_payload(const void* src, size_t n, DType, const EncodeContext& ctx,
                                wire::Header& h, uint8_t* out) override {
    const auto* x = static_cast<const float*>(src);
    const uint32_t bits = spec().bits;
    const uint32_t bucket = spec().bucket;
    const uint32_t levels = quant::qsgd_levels(bits);
    h.bits = bits;
    h.bucket = bucket;
    h.flags = spec().stochastic ? 0 : wire::kFlagNearestRounding;
    uint64_t payload = 0;
    bucketed_payload_bytes(n, bits, bucket, kScaleBytes, payload);
    const uint64_t nb = quant::bucket_count(n, bucket);
    uint8_t* codes = out + nb * kScaleBytes;
    if (bits != 8) std::memset(codes, 0, quant::code_bytes(n, bits));

    const RandomStream rs{spec().seed, ctx.step, ctx.rank};
    uint32_t* words = workspace().get<uint32_t>(0, kRandomTile + 4);
    for (uint64_t b = 0; b < nb; ++b) {
      const uint64_t lo = b * bucket;
      const uint64_t hi = std::min<uint64_t>(lo + bucket, n);
      float mn = x[lo], mx = x[lo];
      for (uint64_t i = lo + 1; i < hi; ++i) {
        mn = std::min(mn, x[i]);
        mx = std::max(mx, x[i]);
      }
      const quant::QsgdScale s = quant::qsgd_scale(mn, mx, levels);
      store_le(out, 2 * b, s.min);
      store_le(out, 2 * b + 1, s.unit);
      for (uint64_t t = lo; t < hi; t += kRandomTile) {
        const uint64_t end = std::min(t + kRandomTile, hi);
        const uint64_t base = t & ~uint64_t{3};
        if (spec().stochastic) philox_fill(rs, base, words, end - base);
        for (uint64_t i = t; i < end; ++i) {
          const float r = spec().stochastic ? uniform01(words[i - base]) : 0.5f;
          const uint32_t q = quant::qsgd_quantize(x[i], s, levels, r);
          if (bits == 8) {
            codes[i] = static_cast<uint8_t>(q);
          } else {
            const uint64_t bit = i * bits;
            codes[bit >> 3] = static_cast<uint8_t>(codes[bit >> 3] | (q << (bit & 7)));
          }
        }
      }
    }
    return payload;
  }
};

std::unique_ptr<Codec> make_qsgd(const CodecSpec& spec) { return std::make_unique<QsgdCodec>(spec); }

Status validate_qsgd(const wire::Header& h, const uint8_t*, uint64_t& nnz) {
  if (h.bits != 1 && h.bits != 2 && h.bits != 4 && h.bits != 8) {
    return invalid_message("qsgd bit width " + std::to_string(h.bits) + " is not 1, 2, 4 or 8");
  }
  return validate_bucketed(h, kScaleBytes, nnz);
}

void apply_qsgd(const wire::Header& h, const uint8_t* payload, void* dst, DType, DecodeMode mode) {
  const uint64_t nb = quant::bucket_count(h.count, h.bucket);
  const uint8_t* codes = payload + nb * kScaleBytes;
  auto* d = static_cast<float*>(dst);
  for (uint64_t b = 0; b < nb; ++b) {
    const uint64_t lo = b * h.bucket;
    const uint64_t len = std::min<uint64_t>(h.bucket, h.count - lo);
    const quant::QsgdScale s{load_le<float>(payload, 2 * b), load_le<float>(payload, 2 * b + 1), 0.0f};
    if (h.bits == 8) {
      apply_dense<F32>(d + lo, len, mode,
                       [&](uint64_t i) { return quant::qsgd_dequantize(codes[lo + i], s); });
    } else {
      apply_dense<F32>(d + lo, len, mode, [&](uint64_t i) {
        return quant::qsgd_dequantize(quant::get_code(codes, lo + i, h.bits), s);
      });
    }
  }
}

}  // namespace

const CodecEntry kQsgdEntry{CodecId::kQsgd, "qsgd", "bits,bucket,rounding,seed", make_qsgd,
                            validate_qsgd, apply_qsgd, false};

}  // namespace gw::detail
