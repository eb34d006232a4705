// Shared shape of the index-carrying sparse codecs (topk, dgc): they differ only in how
// they choose the indices.
#pragma once

#include <cstring>

#include "compressors/codec_registry.hpp"
#include "compressors/sparse_layout.hpp"
#include "compressors/workspace.hpp"

namespace gw::detail {

class IndexedSparseCodec : public Codec {
 public:
  explicit IndexedSparseCodec(const CodecSpec& spec) : Codec(spec) {}

  size_t max_encoded_bytes(size_t n, DType) const override {
    if (n > wire::kMaxCount) return SIZE_MAX;
    return wire::kHeaderBytes + sparse_payload_bytes(n, spec().k_for(n));
  }

 protected:
  // Writes at most k increasing indices into idx (room for k); returns how many.
  virtual uint64_t choose(const float* x, uint64_t n, uint64_t k, const EncodeContext& ctx,
                          uint32_t* idx) = 0;
  virtual uint64_t choose(const float* x, uint64_t n, uint64_t k, const EncodeContext& ctx,
                          uint64_t* idx) = 0;

  Result<size_t> encode_payload(const void* src, size_t n, DType, const EncodeContext& ctx,
                                wire::Header& h, uint8_t* out) override {
    const auto* x = static_cast<const float*>(src);
    const uint64_t k = spec().k_for(n);
    h.k = index_bytes(n) == 4 ? write<uint32_t>(x, n, k, ctx, out) : write<uint64_t>(x, n, k, ctx, out);
    return sparse_payload_bytes(n, h.k);
  }

 private:
  template <class Idx>
  uint64_t write(const float* x, uint64_t n, uint64_t k, const EncodeContext& ctx, uint8_t* out) {
    // Slot 0 belongs to this function; choose() may use slots 1 to 3.
    Idx* idx = workspace().get<Idx>(0, k + 1);
    const uint64_t kept = choose(x, n, k, ctx, idx);
    if (kept > 0) std::memcpy(out, idx, kept * sizeof(Idx));
    uint8_t* values = out + kept * sizeof(Idx);
    for (uint64_t i = 0; i < kept; ++i) store_le(values, i, x[idx[i]]);
    return kept;
  }
};

}  // namespace gw::detail
