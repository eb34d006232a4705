// qsgd: per bucket, min and unit as fp32; each element a bits-wide code q with
// value = min + q * unit, rounded stochastically (unbiased) or to nearest.
#include <algorithm>
#include <cstring>
#include <iterator>
#include <type_traits>

#include "compressors/bucketed_layout.hpp"
#include "compressors/codec_registry.hpp"
#include "compressors/element_io.hpp"
#include "compressors/host_simd.hpp"
#include "compressors/payload_io.hpp"
#include "compressors/philox.hpp"
#include "compressors/spec_params.hpp"
#include "compressors/workspace.hpp"

namespace gw::detail {
namespace {

constexpr uint32_t kScaleBytes = 8;  // min, unit
constexpr uint64_t kRandomTile = 4096;
constexpr int kMinMaxLanes = 16;

// A bucket's min and max exactly as the sequential scan
//   mn = mx = x[0]; for i: mn = std::min(mn, x[i]); mx = std::max(mx, x[i]);
// computes them (kept below as the reference and the fallback): a NaN first element sticks,
// later NaNs are skipped, and an equal value never replaces the one found first. The fast
// path scans in kMinMaxLanes independent lanes (vectorizable compare-and-select) and folds
// them. That reorders the comparisons, which matters only when several elements tie for
// the extreme with different bits: possible only for +0 and -0, so a zero extreme (or a NaN
// first element) takes the sequential scan.
void min_max_sequential(const float* x, uint64_t len, float& mn, float& mx) {
  mn = x[0];
  mx = x[0];
  for (uint64_t i = 1; i < len; ++i) {
    mn = std::min(mn, x[i]);
    mx = std::max(mx, x[i]);
  }
}

GW_INLINE_HOT void bucket_min_max(const float* x, uint64_t len, float& mn, float& mx) {
  const float first = x[0];
  if (len < 2 * kMinMaxLanes || !(first == first)) {
    min_max_sequential(x, len, mn, mx);
    return;
  }
  float lmn[kMinMaxLanes], lmx[kMinMaxLanes];
  for (int l = 0; l < kMinMaxLanes; ++l) lmn[l] = lmx[l] = first;
  uint64_t i = 0;
  for (; i + kMinMaxLanes <= len; i += kMinMaxLanes) {
    for (int l = 0; l < kMinMaxLanes; ++l) {
      const float v = x[i + l];
      lmn[l] = v < lmn[l] ? v : lmn[l];
      lmx[l] = v > lmx[l] ? v : lmx[l];
    }
  }
  for (; i < len; ++i) {
    lmn[0] = x[i] < lmn[0] ? x[i] : lmn[0];
    lmx[0] = x[i] > lmx[0] ? x[i] : lmx[0];
  }
  float a = lmn[0], b = lmx[0];
  for (int l = 1; l < kMinMaxLanes; ++l) {
    a = lmn[l] < a ? lmn[l] : a;
    b = lmx[l] > b ? lmx[l] : b;
  }
  if (a == 0.0f || b == 0.0f) {
    min_max_sequential(x, len, mn, mx);
    return;
  }
  mn = a;
  mx = b;
}

// quant::qsgd_quantize, bit for bit for buckets narrower than FLT_MAX, in a form that vectorizes: the same sub, mul and
// add, then floorf and the clamp to [0, levels] (NaN to 0) done as a clamp in float followed by a truncating
// conversion. Equal because after clamping t to [0, levels] (or -0), truncation and floor agree, and floor commutes
// with clamping to integer bounds. No libm call.
GW_INLINE_HOT uint32_t quantize(float x, float mn, float inv_unit, float levels, float r) {
  const float t = hd::add(hd::mul(hd::sub(x, mn), inv_unit), r);
  float c = t >= 0.0f ? t : 0.0f;  // NaN and negatives to 0
  c = c <= levels ? c : levels;
  return static_cast<uint32_t>(static_cast<int32_t>(c));
}

// uniform01(w), with the conversion written signed (w >> 8 < 2^24, so it is exact either
// way) because SSE2 has no unsigned int-to-float conversion.
GW_INLINE_HOT float uniform01_fast(uint32_t w) {
  return static_cast<float>(static_cast<int32_t>(w >> 8)) * (1.0f / 16777216.0f);
}

// Per-tile scratch: random words (whole Philox blocks) and the tile's codes before packing.
struct Scratch {
  uint32_t* words;  // kRandomTile + 4
  uint8_t* q;       // kRandomTile
};

// Encodes buckets and codes for bits = kBits; the codes region is zeroed when kBits < 8.
// Per tile: random words, quantize into q (vectorized), then pack into code bytes: bytes
// the tile covers whole are stored, the partial ones at its ends are or-ed in.
template <uint32_t kBits, bool kStochastic>
GW_INLINE_HOT void encode_buckets(const float* x, uint64_t n, uint32_t bucket, const RandomStream& rs, uint8_t* out,
                                  const Scratch& scratch) {
  constexpr uint32_t levels_u = (1u << kBits) - 1u;
  const float levels = static_cast<float>(levels_u);
  constexpr uint64_t kPerByte = 8 / kBits;
  const uint64_t nb = quant::bucket_count(n, bucket);
  uint8_t* codes = out + nb * kScaleBytes;
  uint32_t* words = scratch.words;
  uint8_t* q = scratch.q;
  for (uint64_t b = 0; b < nb; ++b) {
    const uint64_t lo = b * bucket;
    const uint64_t hi = std::min<uint64_t>(lo + bucket, n);
    float mn, mx;
    bucket_min_max(x + lo, hi - lo, mn, mx);
    const quant::QsgdScale s = quant::qsgd_scale(mn, mx, levels_u);
    store_le(out, 2 * b, s.min);
    store_le(out, 2 * b + 1, s.unit);
    const float smin = s.min, inv = s.inv_unit;
    // Only a bucket wider than FLT_MAX can overflow x - min: it takes the scalar form.
    const bool wide = !(hd::sub(mx, mn) <= 3.4e38f);
    for (uint64_t t = lo; t < hi; t += kRandomTile) {
      const uint64_t end = std::min(t + kRandomTile, hi);
      const uint64_t len = end - t;
      const float* xt = x + t;
      uint8_t* qt = kBits == 8 ? codes + t : q;
      const uint32_t* w = nullptr;
      if (kStochastic) {
        const uint64_t base = t & ~uint64_t{3};
        philox_fill(rs, base, words, end - base);
        w = words + (t - base);
      }
      auto r_at = [&](uint64_t i) { return kStochastic ? uniform01_fast(w[i]) : 0.5f; };
      if (wide) {
        for (uint64_t i = 0; i < len; ++i) {
          qt[i] = static_cast<uint8_t>(quant::qsgd_quantize(xt[i], s, levels_u, r_at(i)));
        }
      } else {
        for (uint64_t i = 0; i < len; ++i) {
          qt[i] = static_cast<uint8_t>(quantize(xt[i], smin, inv, levels, r_at(i)));
        }
      }
      if (kBits == 8) continue;
      // Pack: element i goes to byte i / kPerByte at bit (i % kPerByte) * kBits.
      uint64_t i = t;
      for (; i < end && i % kPerByte != 0; ++i) {
        codes[i / kPerByte] = static_cast<uint8_t>(codes[i / kPerByte] | (q[i - t] << ((i % kPerByte) * kBits)));
      }
      for (; i + kPerByte <= end; i += kPerByte) {
        const uint8_t* g = q + (i - t);
        uint32_t v = 0;
        for (uint32_t j = 0; j < kPerByte; ++j) v |= static_cast<uint32_t>(g[j]) << (j * kBits);
        codes[i / kPerByte] = static_cast<uint8_t>(v);
      }
      for (; i < end; ++i) {
        codes[i / kPerByte] = static_cast<uint8_t>(codes[i / kPerByte] | (q[i - t] << ((i % kPerByte) * kBits)));
      }
    }
  }
}

template <class Fn>
GW_INLINE_HOT void with_bits(uint32_t bits, bool stochastic, Fn&& fn) {
  switch (bits * 2 + (stochastic ? 1 : 0)) {
    case 2: fn(std::integral_constant<uint32_t, 1>{}, std::false_type{}); break;
    case 3: fn(std::integral_constant<uint32_t, 1>{}, std::true_type{}); break;
    case 4: fn(std::integral_constant<uint32_t, 2>{}, std::false_type{}); break;
    case 5: fn(std::integral_constant<uint32_t, 2>{}, std::true_type{}); break;
    case 8: fn(std::integral_constant<uint32_t, 4>{}, std::false_type{}); break;
    case 9: fn(std::integral_constant<uint32_t, 4>{}, std::true_type{}); break;
    case 16: fn(std::integral_constant<uint32_t, 8>{}, std::false_type{}); break;
    default: fn(std::integral_constant<uint32_t, 8>{}, std::true_type{}); break;
  }
}

// The encode loop, built once for the baseline and, on x86-64, once each for AVX2 and
// AVX-512 (host_simd() picks). Float semantics are the same in every variant: the file is
// built with -ffp-contract=off, so no variant fuses the encode math into FMAs.
#define GW_QSGD_ENCODE_BODY                                                                   \
  with_bits(bits, stochastic, [&](auto kb, auto ks) {                                         \
    encode_buckets<decltype(kb)::value, decltype(ks)::value>(x, n, bucket, rs, out, scratch); \
  })

void encode_all_baseline(const float* x, uint64_t n, uint32_t bits, uint32_t bucket, bool stochastic,
                         const RandomStream& rs, uint8_t* out, const Scratch& scratch) {
  GW_QSGD_ENCODE_BODY;
}

#if defined(GW_HOST_X86_SIMD)
GW_TARGET_AVX2 void encode_all_avx2(const float* x, uint64_t n, uint32_t bits, uint32_t bucket, bool stochastic,
                                    const RandomStream& rs, uint8_t* out, const Scratch& scratch) {
  GW_QSGD_ENCODE_BODY;
}

GW_TARGET_AVX512 void encode_all_avx512(const float* x, uint64_t n, uint32_t bits, uint32_t bucket, bool stochastic,
                                        const RandomStream& rs, uint8_t* out, const Scratch& scratch) {
  GW_QSGD_ENCODE_BODY;
}
#endif

void encode_all(const float* x, uint64_t n, uint32_t bits, uint32_t bucket, bool stochastic, const RandomStream& rs,
                uint8_t* out, const Scratch& scratch) {
#if defined(GW_HOST_X86_SIMD)
  switch (host_simd()) {
    case HostSimd::kAvx512: return encode_all_avx512(x, n, bits, bucket, stochastic, rs, out, scratch);
    case HostSimd::kAvx2: return encode_all_avx2(x, n, bits, bucket, stochastic, rs, out, scratch);
    case HostSimd::kBaseline: break;
  }
#endif
  encode_all_baseline(x, n, bits, bucket, stochastic, rs, out, scratch);
}

class QsgdCodec final : public Codec {
 public:
  explicit QsgdCodec(const CodecSpec& spec) : Codec(spec) {}

  size_t max_encoded_bytes(size_t n, DType) const override {
    uint64_t bytes = 0;
    if (!bucketed_payload_bytes(n, spec().bits, spec().bucket, kScaleBytes, bytes)) return SIZE_MAX;
    return bytes + wire::kHeaderBytes;
  }

 protected:
  Result<size_t> encode_payload(const void* src, size_t n, DType, const EncodeContext& ctx, wire::Header& h,
                                uint8_t* out) override {
    const auto* x = static_cast<const float*>(src);
    const uint32_t bits = spec().bits;
    const uint32_t bucket = spec().bucket;
    h.bits = bits;
    h.bucket = bucket;
    h.flags = spec().stochastic ? 0 : wire::kFlagNearestRounding;
    uint64_t payload = 0;
    bucketed_payload_bytes(n, bits, bucket, kScaleBytes, payload);
    const uint64_t nb = quant::bucket_count(n, bucket);
    if (bits != 8) std::memset(out + nb * kScaleBytes, 0, quant::code_bytes(n, bits));
    const RandomStream rs{spec().seed, ctx.step, ctx.rank};
    const Scratch scratch{workspace().get<uint32_t>(0, kRandomTile + 4), workspace().get<uint8_t>(1, kRandomTile)};
    encode_all(x, n, bits, bucket, spec().stochastic, rs, out, scratch);
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

template <DecodeMode kMode>
GW_INLINE_HOT void apply_value(float& d, float v) {
  if (kMode == DecodeMode::kOverwrite) d = v;
  if (kMode == DecodeMode::kAccumulate) d = d + v;
  if (kMode == DecodeMode::kSubtract) d = d - v;
}

// Decodes every bucket: value = quant::qsgd_dequantize(code, scale), applied per kMode.
// Codes of whole bytes are unpacked 32 bits at a time (vectorizable); a bucket's partial
// bytes at either end go through quant::get_code.
template <uint32_t kBits, DecodeMode kMode>
GW_INLINE_HOT void decode_buckets(uint64_t count, uint32_t bucket, const uint8_t* payload, float* d) {
  constexpr uint64_t kPerByte = 8 / kBits;
  constexpr uint32_t kMask = (1u << kBits) - 1u;
  const uint64_t nb = quant::bucket_count(count, bucket);
  const uint8_t* codes = payload + nb * kScaleBytes;
  for (uint64_t b = 0; b < nb; ++b) {
    const uint64_t lo = b * bucket;
    const uint64_t hi = std::min<uint64_t>(lo + bucket, count);
    const quant::QsgdScale s{load_le<float>(payload, 2 * b), load_le<float>(payload, 2 * b + 1), 0.0f};
    uint64_t i = lo;
    for (; i < hi && i % kPerByte != 0; ++i) {
      apply_value<kMode>(d[i], quant::qsgd_dequantize(quant::get_code(codes, i, kBits), s));
    }
    constexpr uint64_t kPerWord = 4 * kPerByte;
    for (; i + kPerWord <= hi; i += kPerWord) {
      uint32_t word;
      std::memcpy(&word, codes + i / kPerByte, sizeof word);
      for (uint32_t j = 0; j < kPerWord; ++j) {
        apply_value<kMode>(d[i + j], quant::qsgd_dequantize((word >> (j * kBits)) & kMask, s));
      }
    }
    for (; i + kPerByte <= hi; i += kPerByte) {
      const uint32_t byte = codes[i / kPerByte];
      for (uint32_t j = 0; j < kPerByte; ++j) {
        apply_value<kMode>(d[i + j], quant::qsgd_dequantize((byte >> (j * kBits)) & kMask, s));
      }
    }
    for (; i < hi; ++i) {
      apply_value<kMode>(d[i], quant::qsgd_dequantize(quant::get_code(codes, i, kBits), s));
    }
  }
}

template <class Fn>
GW_INLINE_HOT void with_bits_mode(uint32_t bits, DecodeMode mode, Fn&& fn) {
  auto by_mode = [&](auto kb) {
    switch (mode) {
      case DecodeMode::kOverwrite: fn(kb, std::integral_constant<DecodeMode, DecodeMode::kOverwrite>{}); break;
      case DecodeMode::kAccumulate: fn(kb, std::integral_constant<DecodeMode, DecodeMode::kAccumulate>{}); break;
      case DecodeMode::kSubtract: fn(kb, std::integral_constant<DecodeMode, DecodeMode::kSubtract>{}); break;
    }
  };
  switch (bits) {
    case 1: by_mode(std::integral_constant<uint32_t, 1>{}); break;
    case 2: by_mode(std::integral_constant<uint32_t, 2>{}); break;
    case 4: by_mode(std::integral_constant<uint32_t, 4>{}); break;
    default: by_mode(std::integral_constant<uint32_t, 8>{}); break;
  }
}

// Like the encoder, one build per instruction set. The dequantization is a fused
// multiply-add by definition (quant::qsgd_dequantize); the AVX2 and AVX-512 builds have FMA
// instructions for it, the baseline build calls the C library's (correctly rounded) fmaf.
#define GW_QSGD_DECODE_BODY                                                              \
  with_bits_mode(bits, mode, [&](auto kb, auto km) {                                     \
    decode_buckets<decltype(kb)::value, decltype(km)::value>(count, bucket, payload, d); \
  })

void decode_all_baseline(uint64_t count, uint32_t bits, uint32_t bucket, const uint8_t* payload, float* d,
                         DecodeMode mode) {
  GW_QSGD_DECODE_BODY;
}

#if defined(GW_HOST_X86_SIMD)
GW_TARGET_AVX2 void decode_all_avx2(uint64_t count, uint32_t bits, uint32_t bucket, const uint8_t* payload, float* d,
                                    DecodeMode mode) {
  GW_QSGD_DECODE_BODY;
}

GW_TARGET_AVX512 void decode_all_avx512(uint64_t count, uint32_t bits, uint32_t bucket, const uint8_t* payload,
                                        float* d, DecodeMode mode) {
  GW_QSGD_DECODE_BODY;
}
#endif

void apply_qsgd(const wire::Header& h, const uint8_t* payload, void* dst, DType, DecodeMode mode) {
  auto* d = static_cast<float*>(dst);
#if defined(GW_HOST_X86_SIMD)
  switch (host_simd()) {
    case HostSimd::kAvx512: return decode_all_avx512(h.count, h.bits, h.bucket, payload, d, mode);
    case HostSimd::kAvx2: return decode_all_avx2(h.count, h.bits, h.bucket, payload, d, mode);
    case HostSimd::kBaseline: break;
  }
#endif
  decode_all_baseline(h.count, h.bits, h.bucket, payload, d, mode);
}

// Error feedback needs a compressor whose error is smaller than its input. 1-bit stochastic
// min/max rounding is not one: its residual grows step after step (seen: inf within 150 steps
// of a constant gradient). Rounding to nearest is.
Status finish_qsgd(CodecSpec& spec) {
  if (spec.ef && spec.bits == 1 && spec.stochastic) {
    return invalid_argument(
        "codec spec: qsgd:bits=1 with ef=1 diverges under stochastic rounding; "
        "add rounding=nearest, or use sign");
  }
  return Status::ok();
}

constexpr SpecParam kQsgdParams[] = {
    unsigned_param("bits", &CodecSpec::bits, 1, 8, "1, 2, 4 or 8").one_of(1, 2, 4, 8).with_default(8),
    kBucketParam,
    choice_param("rounding", &CodecSpec::stochastic, "nearest", "stochastic", "stochastic or nearest").with_default(1),
    kSeedParam,
};
const char* const kQsgdBench[] = {
    "qsgd:bits=8", "qsgd:bits=4", "qsgd:bits=2", "qsgd:bits=1", "qsgd:bits=8,rounding=nearest", nullptr};

}  // namespace

const CodecEntry kQsgdEntry{CodecId::kQsgd, "qsgd",
                            kQsgdParams,    std::size(kQsgdParams),
                            finish_qsgd,    kCapLossy | kCapErrorFeedback,
                            make_qsgd,      validate_qsgd,
                            apply_qsgd,     kQsgdBench};
GW_REGISTER_CODEC(kQsgdEntry);

}  // namespace gw::detail
