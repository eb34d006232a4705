// randomk: k values at indices every rank derives from (seed, step) alone, so the indices
// cost no bytes. Indices are stratified (one per stratum of n / k elements): strictly
// increasing, each computable on its own. The header carries seed and step.
#include <algorithm>
#include <iterator>
#include <string>

#include "compressors/codec_registry.hpp"
#include "compressors/element_io.hpp"
#include "compressors/payload_io.hpp"
#include "compressors/spec_params.hpp"
#include "compressors/stratified.hpp"

namespace gw::detail {
namespace {

RandomStream shared_stream(uint64_t seed, uint64_t step) { return RandomStream{seed, step, kSharedStreamRank}; }

class RandomkCodec final : public Codec {
 public:
  explicit RandomkCodec(const CodecSpec& spec) : Codec(spec) {}

  size_t max_encoded_bytes(size_t n, DType) const override {
    if (n > wire::kMaxCount) return SIZE_MAX;
    return wire::kHeaderBytes + spec().k_for(n) * sizeof(float);
  }

 protected:
  Result<size_t> encode_payload(const void* src, size_t n, DType, const EncodeContext& ctx, wire::Header& h,
                                uint8_t* out) override {
    const auto* x = static_cast<const float*>(src);
    const uint64_t k = spec().k_for(n);
    h.k = k;
    h.seed = spec().seed;
    h.step = ctx.step;
    const RandomStream rs = shared_stream(h.seed, h.step);
    for (uint64_t j = 0; j < k; ++j) store_le(out, j, x[stratified_index(rs, j, n, k)]);
    return k * sizeof(float);
  }
};

std::unique_ptr<Codec> make_randomk(const CodecSpec& spec) { return std::make_unique<RandomkCodec>(spec); }

Status validate_randomk(const wire::Header& h, const uint8_t*, uint64_t& nnz) {
  if (h.bits != 0 || h.bucket != 0 || h.flags != 0) {
    return invalid_message("randomk message has quantizer fields set");
  }
  if (h.dtype != DType::kFloat32) return invalid_message("randomk message must carry float32");
  if (h.k > h.count || (h.k == 0 && h.count > 0)) {
    return invalid_message("k = " + std::to_string(h.k) + " is out of range for count " + std::to_string(h.count));
  }
  if (h.payload_bytes != h.k * sizeof(float)) {
    return invalid_message("payload is " + std::to_string(h.payload_bytes) + " bytes, expected " +
                           std::to_string(h.k * sizeof(float)));
  }
  nnz = h.k;
  return Status::ok();
}

void apply_randomk(const wire::Header& h, const uint8_t* payload, void* dst, DType, DecodeMode mode) {
  auto* d = static_cast<float*>(dst);
  if (mode == DecodeMode::kOverwrite) std::fill(d, d + h.count, 0.0f);
  const RandomStream rs = shared_stream(h.seed, h.step);
  for (uint64_t j = 0; j < h.k; ++j) {
    apply_one<F32>(d[stratified_index(rs, j, h.count, h.k)], load_le<float>(payload, j), mode);
  }
}

constexpr SpecParam kRandomkParams[] = {kRatioParam, kKParam, kSeedParam};
const char* const kRandomkBench[] = {"randomk:ratio=0.01", nullptr};

}  // namespace

const CodecEntry kRandomkEntry{CodecId::kRandomk, "randomk",
                               kRandomkParams,    std::size(kRandomkParams),
                               finish_sparse,     kCapLossy | kCapErrorFeedback | kCapSparse,
                               make_randomk,      validate_randomk,
                               apply_randomk,     kRandomkBench};
GW_REGISTER_CODEC(kRandomkEntry);

}  // namespace gw::detail
