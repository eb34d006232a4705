// dgc: top-k by a sampled threshold, after Deep Gradient Compression (Lin et al., ICLR'18).
// Sample a fraction of |x| (stratified, from the rank's random stream), take the threshold
// that would keep 1.25 k of the whole, keep every element at or above it in one pass, and
// run an exact top-k over those candidates when more than k pass. Fewer than k may pass;
// then all of them are sent. Too many to hold (a degenerate sample) falls back to exact top-k.
#include <algorithm>
#include <cmath>
#include <iterator>

#include "compressors/element_io.hpp"
#include "compressors/hd.hpp"
#include "compressors/sparse_codec.hpp"
#include "compressors/spec_params.hpp"
#include "compressors/stratified.hpp"
#include "compressors/topk_select.hpp"

namespace gw::detail {
namespace {

constexpr uint64_t kMinSample = 256;
constexpr double kOverSelect = 1.25;
constexpr uint64_t kExactBelow = 4096;  // small inputs: exact top-k costs less than sampling
constexpr uint64_t kSampleTile = 2048;  // samples drawn per tile (even: whole Philox blocks)

class DgcCodec final : public IndexedSparseCodec {
 public:
  explicit DgcCodec(const CodecSpec& spec) : IndexedSparseCodec(spec) {}

 protected:
  uint64_t choose(const float* x, uint64_t n, uint64_t k, const EncodeContext& ctx, uint32_t* idx) override {
    return choose_impl(x, n, k, ctx, idx);
  }
  uint64_t choose(const float* x, uint64_t n, uint64_t k, const EncodeContext& ctx, uint64_t* idx) override {
    return choose_impl(x, n, k, ctx, idx);
  }
  uint64_t choose_adding(float* acc, const float* add, uint64_t n, uint64_t k, const EncodeContext& ctx,
                         uint32_t* idx) override {
    return choose_impl(acc, n, k, ctx, idx, add);
  }
  uint64_t choose_adding(float* acc, const float* add, uint64_t n, uint64_t k, const EncodeContext& ctx,
                         uint64_t* idx) override {
    return choose_impl(acc, n, k, ctx, idx, add);
  }

 private:
  // On x, or with add on x + add, which is left in x (the addition rides on the candidate
  // pass; x is written only then).
  template <class Idx>
  uint64_t choose_impl(const float* x, uint64_t n, uint64_t k, const EncodeContext& ctx, Idx* idx,
                       const float* add = nullptr) {
    if (k == 0 || n < kExactBelow || k * 4 >= n) {
      if (add != nullptr) add_into(const_cast<float*>(x), add, n);
      if (k == 0) return 0;
      select_topk(x, n, k, idx, workspace());
      return k;
    }
    const uint32_t threshold = sampled_threshold(x, add, n, k, ctx);
    // Room for 4k candidates; more means the sample misled us badly.
    const uint64_t cap = std::min<uint64_t>(n, 4 * k + 1024);
    Idx* cand = workspace().get<Idx>(1, cap + kCollectSlack);
    const uint64_t c = add != nullptr ? add_and_collect_at_least(const_cast<float*>(x), add, n, threshold, cand, cap)
                                      : collect_at_least(x, n, threshold, cand, cap);
    if (c > cap) {
      select_topk(x, n, k, idx, workspace());
      return k;
    }
    if (c <= k) {
      std::copy(cand, cand + c, idx);
      return c;
    }
    select_topk_among(x, cand, c, k, idx, workspace());
    return k;
  }

  uint32_t sampled_threshold(const float* x, const float* add, uint64_t n, uint64_t k, const EncodeContext& ctx) {
    const uint64_t m = std::min<uint64_t>(
        n, std::max<uint64_t>(kMinSample, static_cast<uint64_t>(std::ceil(spec().sample * static_cast<double>(n)))));
    uint32_t* keys = workspace().get<uint32_t>(2, m);
    const RandomStream rs{spec().seed, ctx.step, ctx.rank};
    // keys[j] = |x[stratified_index(rs, j, n, m)]|, a tile at a time: the tile's random
    // words come from philox_fill (sample j uses words 2j and 2j + 1 of the stream: block
    // j / 2, words 0-1 or 2-3), then the positions, then the loads, which no longer wait on
    // one another and so overlap their cache misses.
    uint32_t* words = workspace().get<uint32_t>(4, 2 * kSampleTile + 4);
    uint64_t* pos = workspace().get<uint64_t>(5, kSampleTile);
    const uint64_t q = n / m, r = n % m;
    for (uint64_t j0 = 0; j0 < m; j0 += kSampleTile) {
      const uint64_t len = std::min(kSampleTile, m - j0);
      philox_fill(rs, 2 * j0, words, 2 * len);
      for (uint64_t t = 0; t < len; ++t) {
        const uint64_t j = j0 + t;
        const uint64_t start = j * q + (j < r ? j : r);
        const uint64_t width = q + (j < r ? 1 : 0);
        const uint64_t word = (static_cast<uint64_t>(words[2 * t + 1]) << 32) | words[2 * t];
        pos[t] = start + hd::mulhi64(word, width);
      }
      if (add != nullptr) {
        for (uint64_t t = 0; t < len; ++t) keys[j0 + t] = hd::magnitude_key(x[pos[t]] + add[pos[t]]);
      } else {
        for (uint64_t t = 0; t < len; ++t) keys[j0 + t] = hd::magnitude_key(x[pos[t]]);
      }
    }
    const double want = kOverSelect * static_cast<double>(k) * static_cast<double>(m) / static_cast<double>(n);
    const uint64_t rank = std::clamp<uint64_t>(static_cast<uint64_t>(std::ceil(want)), 1, m);
    std::nth_element(keys, keys + (rank - 1), keys + m, std::greater<uint32_t>());
    return keys[rank - 1];
  }
};

std::unique_ptr<Codec> make_dgc(const CodecSpec& spec) { return std::make_unique<DgcCodec>(spec); }

void apply_dgc(const wire::Header& h, const uint8_t* payload, void* dst, DType, DecodeMode mode) {
  apply_sparse(h, payload, dst, mode);
}

constexpr SpecParam kDgcParams[] = {
    kRatioParam,
    kKParam,
    real_param("sample", &CodecSpec::sample, 0.0, 1.0, "0 < sample <= 1").with_default(0.01),
    kSeedParam,
};
const char* const kDgcBench[] = {"dgc:ratio=0.001", "dgc:ratio=0.01", nullptr};

}  // namespace

const CodecEntry kDgcEntry{CodecId::kDgc, "dgc",
                           kDgcParams,    std::size(kDgcParams),
                           finish_sparse, kCapLossy | kCapErrorFeedback | kCapSparse | kCapIndices,
                           make_dgc,      validate_sparse,
                           apply_dgc,     kDgcBench};
GW_REGISTER_CODEC(kDgcEntry);

}  // namespace gw::detail
