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
  virtual uint64_t choose(const float* x, uint64_t n, uint64_t k, const EncodeContext& ctx, uint32_t* idx) = 0;
  virtual uint64_t choose(const float* x, uint64_t n, uint64_t k, const EncodeContext& ctx, uint64_t* idx) = 0;
  // choose() on acc + add, leaving the sum in acc: the addition rides on the codec's own
  // pass over the input.
  virtual uint64_t choose_adding(float* acc, const float* add, uint64_t n, uint64_t k, const EncodeContext& ctx,
                                 uint32_t* idx) = 0;
  virtual uint64_t choose_adding(float* acc, const float* add, uint64_t n, uint64_t k, const EncodeContext& ctx,
                                 uint64_t* idx) = 0;

  Result<size_t> encode_payload(const void* src, size_t n, DType, const EncodeContext& ctx, wire::Header& h,
                                uint8_t* out) override {
    const auto* x = static_cast<const float*>(src);
    const uint64_t k = spec().k_for(n);
    if (index_bytes(n) == 4) {
      uint32_t* idx = indices<uint32_t>(k);
      h.k = emit(x, choose(x, n, k, ctx, idx), idx, out);
    } else {
      uint64_t* idx = indices<uint64_t>(k);
      h.k = emit(x, choose(x, n, k, ctx, idx), idx, out);
    }
    return sparse_payload_bytes(n, h.k);
  }
  Result<size_t> encode_payload_adding(float* acc, const float* add, size_t n, const EncodeContext& ctx,
                                       wire::Header& h, uint8_t* out) override {
    const uint64_t k = spec().k_for(n);
    if (index_bytes(n) == 4) {
      uint32_t* idx = indices<uint32_t>(k);
      h.k = emit(acc, choose_adding(acc, add, n, k, ctx, idx), idx, out);
    } else {
      uint64_t* idx = indices<uint64_t>(k);
      h.k = emit(acc, choose_adding(acc, add, n, k, ctx, idx), idx, out);
    }
    return sparse_payload_bytes(n, h.k);
  }

 private:
  // Room for k indices (and one more) in slot 0, which belongs to this class; choose() may
  // use the others. The same buffer on every call with the same k.
  template <class Idx>
  Idx* indices(uint64_t k) {
    return workspace().get<Idx>(0, k + 1);
  }
  // The payload: the kept indices, then the values of x at them.
  template <class Idx>
  static uint64_t emit(const float* x, uint64_t kept, const Idx* idx, uint8_t* out) {
    if (kept > 0) std::memcpy(out, idx, kept * sizeof(Idx));
    uint8_t* values = out + kept * sizeof(Idx);
    for (uint64_t i = 0; i < kept; ++i) store_le(values, i, x[idx[i]]);
    return kept;
  }
};

}  // namespace gw::detail
