// Per-element and per-bucket math of the quantizing codecs (qsgd, sign), shared by the host
// codecs and the CUDA kernels so that both write the same bits.
#pragma once

#include <cstdint>

#include "compressors/hd.hpp"

namespace gw::quant {

// qsgd: a bucket's codes q in [0, levels] stand for min + q * unit.
struct QsgdScale {
  float min;
  float unit;
  float inv_unit;  // 0 when unit is 0 (constant bucket) or not finite
};

GW_HD uint32_t qsgd_levels(uint32_t bits) { return (1u << bits) - 1u; }

GW_HD QsgdScale qsgd_scale(float mn, float mx, uint32_t levels) {
  const float l = static_cast<float>(levels);
  float unit = hd::div(hd::sub(mx, mn), l);
  if (!(unit <= 3.4e38f)) unit = hd::sub(hd::div(mx, l), hd::div(mn, l));  // mx - mn overflowed
  const float inv = (unit > 0.0f && unit <= 3.4e38f) ? hd::div(1.0f, unit) : 0.0f;
  return QsgdScale{mn, unit, inv};
}

// r is a uniform draw in [0, 1) for stochastic rounding, or 0.5 for nearest.
GW_HD uint32_t qsgd_quantize(float x, const QsgdScale& s, uint32_t levels, float r) {
  const float d = hd::sub(x, s.min);
  // A bucket wider than FLT_MAX overflows x - min; scaling each side first cannot.
  const float u = d <= 3.4e38f ? hd::mul(d, s.inv_unit) : hd::sub(hd::mul(x, s.inv_unit), hd::mul(s.min, s.inv_unit));
  float q = floorf(hd::add(u, r));
  q = q >= 0.0f ? q : 0.0f;  // also maps NaN to 0
  const float l = static_cast<float>(levels);
  q = q <= l ? q : l;
  return static_cast<uint32_t>(q);
}

GW_HD float qsgd_dequantize(uint32_t q, const QsgdScale& s) { return hd::fma(static_cast<float>(q), s.unit, s.min); }

// The canonical sum of a bucket's magnitudes, which host and device must reproduce bit for
// bit: 32 lanes, lane l sums elements l, l+32, l+64, ... in order; then lanes fold as
// lane[l] += lane[l + w] for w = 16, 8, 4, 2, 1 (a warp's shuffle-down tree).
constexpr int kSumLanes = 32;

GW_HD float fold_lanes(float* lanes) {
  for (int w = kSumLanes / 2; w >= 1; w /= 2) {
    for (int l = 0; l < w; ++l) lanes[l] = hd::add(lanes[l], lanes[l + w]);
  }
  return lanes[0];
}

// sign: bit 1 means negative; zero, -0 and NaN send bit 0.
GW_HD uint32_t sign_bit(float x) { return x < 0.0f ? 1u : 0u; }
GW_HD float sign_value(uint32_t bit, float scale) { return bit ? -scale : scale; }

// Bucketed layout shared by qsgd and sign: scales first, then codes packed LSB first.
GW_HD uint64_t bucket_count(uint64_t n, uint32_t bucket) { return (n + bucket - 1) / bucket; }
GW_HD uint64_t code_bytes(uint64_t n, uint32_t bits) { return (n * bits + 7) / 8; }

GW_HD uint32_t get_code(const uint8_t* codes, uint64_t i, uint32_t bits) {
  const uint64_t bit = i * bits;
  return (codes[bit >> 3] >> (bit & 7)) & ((1u << bits) - 1u);
}

}  // namespace gw::quant
