// topk: exactly the k largest magnitudes (ties: lower index), as (index, value) pairs.
#include <iterator>

#include "compressors/sparse_codec.hpp"
#include "compressors/spec_params.hpp"
#include "compressors/topk_select.hpp"

namespace gw::detail {
namespace {

class TopkCodec final : public IndexedSparseCodec {
 public:
  explicit TopkCodec(const CodecSpec& spec) : IndexedSparseCodec(spec) {}

 protected:
  uint64_t choose(const float* x, uint64_t n, uint64_t k, const EncodeContext&, uint32_t* idx) override {
    select_topk_sampled(x, n, k, idx, workspace());
    return k;
  }
  uint64_t choose(const float* x, uint64_t n, uint64_t k, const EncodeContext&, uint64_t* idx) override {
    select_topk_sampled(x, n, k, idx, workspace());
    return k;
  }
  uint64_t choose_adding(float* acc, const float* add, uint64_t n, uint64_t k, const EncodeContext&,
                         uint32_t* idx) override {
    select_topk_sampled(acc, add, n, k, idx, workspace());
    return k;
  }
  uint64_t choose_adding(float* acc, const float* add, uint64_t n, uint64_t k, const EncodeContext&,
                         uint64_t* idx) override {
    select_topk_sampled(acc, add, n, k, idx, workspace());
    return k;
  }
};

std::unique_ptr<Codec> make_topk(const CodecSpec& spec) { return std::make_unique<TopkCodec>(spec); }

void apply_topk(const wire::Header& h, const uint8_t* payload, void* dst, DType, DecodeMode mode) {
  apply_sparse(h, payload, dst, mode);
}

constexpr SpecParam kTopkParams[] = {kRatioParam, kKParam};
const char* const kTopkBench[] = {"topk:ratio=0.01", "topk:ratio=0.001", nullptr};

}  // namespace

const CodecEntry kTopkEntry{CodecId::kTopk, "topk",
                            kTopkParams,    std::size(kTopkParams),
                            finish_sparse,  kCapLossy | kCapErrorFeedback | kCapSparse | kCapIndices,
                            make_topk,      validate_sparse,
                            apply_topk,     kTopkBench};
GW_REGISTER_CODEC(kTopkEntry);

}  // namespace gw::detail
