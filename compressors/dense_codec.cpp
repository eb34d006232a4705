// none, fp16 and bf16: every element travels, as the input type (none) or rounded to
// half precision, to nearest even or (rounding=stochastic) stochastically. They take any
// input dtype and decode into any dtype.
#include <iterator>
#include <string>

#include "compressors/codec_registry.hpp"
#include "compressors/dense_layout.hpp"
#include "compressors/element_io.hpp"
#include "compressors/half_bulk.hpp"
#include "compressors/payload_io.hpp"
#include "compressors/philox.hpp"
#include "compressors/spec_params.hpp"

namespace gw::detail {
namespace {

// Stochastic rounding of n elements of dtype (float32, or the other half type, widened exactly
// a tile at a time) into pt (fp16 or bf16); element i takes word i of rs.
void round_stochastic(const void* src, uint64_t n, DType dtype, DType pt, const RandomStream& rs, uint8_t* out) {
  const auto round = pt == DType::kFloat16 ? floats_to_halves_sr : floats_to_bf16_sr;
  if (dtype == DType::kFloat32) {
    round(static_cast<const float*>(src), out, n, rs, 0);
    return;
  }
  constexpr uint64_t kTile = 2048;
  float tile[kTile];
  with_dtype(dtype, [&](auto in) {
    using In = decltype(in);
    const auto* s = static_cast<const typename In::Storage*>(src);
    for (uint64_t lo = 0; lo < n; lo += kTile) {
      const uint64_t len = n - lo < kTile ? n - lo : kTile;
      for (uint64_t i = 0; i < len; ++i) tile[i] = In::load(s[lo + i]);
      round(tile, out + 2 * lo, len, rs, lo);
    }
  });
}

class DenseCodec final : public Codec {
 public:
  explicit DenseCodec(const CodecSpec& spec) : Codec(spec) {}

  bool accepts(DType) const override { return true; }

  size_t max_encoded_bytes(size_t n, DType dtype) const override {
    uint64_t bytes = 0;
    if (!wire::mul_ok(n, dtype_size(dense_payload_dtype(id(), dtype)), bytes) ||
        !wire::add_ok(bytes, wire::kHeaderBytes, bytes)) {
      return SIZE_MAX;
    }
    return bytes;
  }

 protected:
  Result<size_t> encode_payload(const void* src, size_t n, DType dtype, const EncodeContext& ctx, wire::Header&,
                                uint8_t* out) override {
    const DType pt = dense_payload_dtype(id(), dtype);
    if (pt == dtype) {
      if (n > 0) std::memcpy(out, src, n * dtype_size(dtype));
      return n * dtype_size(dtype);
    }
    if (dense_stochastic(spec())) {
      round_stochastic(src, n, dtype, pt, RandomStream{spec().seed, ctx.step, ctx.rank}, out);
      return n * 2;
    }
    if (pt == DType::kFloat16 && dtype == DType::kFloat32) {
      floats_to_halves(static_cast<const float*>(src), out, n);
      return n * 2;
    }
    with_dtype(dtype, [&](auto in) {
      using In = decltype(in);
      const auto* s = static_cast<const typename In::Storage*>(src);
      with_dtype(pt, [&](auto p) {
        using P = decltype(p);
        for (size_t i = 0; i < n; ++i) store_le(out, i, P::store(In::load(s[i])));
      });
    });
    return n * dtype_size(pt);
  }
};

std::unique_ptr<Codec> make_dense(const CodecSpec& spec) { return std::make_unique<DenseCodec>(spec); }

Status validate_dense(const wire::Header& h, const uint8_t*, uint64_t& nnz) {
  if (h.bits != 0 || h.bucket != 0 || h.k != 0 || h.seed != 0 || h.step != 0 || h.flags != 0) {
    return invalid_message("dense message has non-zero sparse or quantizer fields");
  }
  const uint64_t expect = h.count * dtype_size(dense_payload_dtype(h.codec, h.dtype));
  if (h.payload_bytes != expect) {
    return invalid_message("payload is " + std::to_string(h.payload_bytes) + " bytes, expected " +
                           std::to_string(expect) + " for " + std::to_string(h.count) + " elements");
  }
  nnz = h.count;
  return Status::ok();
}

void apply_dense_message(const wire::Header& h, const uint8_t* payload, void* dst, DType dtype, DecodeMode mode) {
  if (dense_payload_dtype(h.codec, h.dtype) == DType::kFloat16 && dtype == DType::kFloat32) {
    // Widen a tile at a time (bulk conversion), then apply it in plain f32.
    constexpr uint64_t kTile = 2048;
    float tile[kTile];
    auto* d = static_cast<float*>(dst);
    for (uint64_t lo = 0; lo < h.count; lo += kTile) {
      const uint64_t len = h.count - lo < kTile ? h.count - lo : kTile;
      halves_to_floats(payload + 2 * lo, tile, len);
      apply_dense<F32>(d + lo, len, mode, [&](uint64_t i) { return tile[i]; });
    }
    return;
  }
  with_dtype(dense_payload_dtype(h.codec, h.dtype), [&](auto p) {
    using P = decltype(p);
    with_dtype(dtype, [&](auto d) {
      using D = decltype(d);
      apply_dense<D>(static_cast<typename D::Storage*>(dst), h.count, mode,
                     [&](uint64_t i) { return P::load(load_le<typename P::Storage>(payload, i)); });
    });
  });
}

// fp16 and bf16: rounding=nearest (the default, not printed) or stochastic, and the seed of
// the stochastic stream (printed with rounding=stochastic, or when set).
bool rounds_stochastically(const CodecSpec& s) { return s.stochastic; }
bool seed_shown(const CodecSpec& s) { return s.stochastic || s.seed != 0; }
constexpr SpecParam kHalfParams[] = {
    choice_param("rounding", &CodecSpec::stochastic, "nearest", "stochastic", "nearest or stochastic")
        .with_default(0)
        .shown_when(rounds_stochastically),
    kSeedParam.shown_when(seed_shown),
};

const char* const kNoneBench[] = {"none", nullptr};
const char* const kFp16Bench[] = {"fp16", "fp16:rounding=stochastic", nullptr};
const char* const kBf16Bench[] = {"bf16", "bf16:rounding=stochastic", nullptr};

}  // namespace

const CodecEntry kNoneEntry{
    CodecId::kNone,      "none",    nullptr, 0, nullptr, kCapAnyDtype, make_dense, validate_dense,
    apply_dense_message, kNoneBench};
const CodecEntry kFp16Entry{CodecId::kFp16,           "fp16",     kHalfParams,    std::size(kHalfParams), nullptr,
                            kCapLossy | kCapAnyDtype, make_dense, validate_dense, apply_dense_message,    kFp16Bench};
const CodecEntry kBf16Entry{CodecId::kBf16,           "bf16",     kHalfParams,    std::size(kHalfParams), nullptr,
                            kCapLossy | kCapAnyDtype, make_dense, validate_dense, apply_dense_message,    kBf16Bench};
GW_REGISTER_CODEC(kNoneEntry);
GW_REGISTER_CODEC(kFp16Entry);
GW_REGISTER_CODEC(kBf16Entry);

}  // namespace gw::detail
