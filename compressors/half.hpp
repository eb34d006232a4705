// fp32 <-> fp16 / bf16 conversions, round to nearest even, NaN kept NaN, overflow to inf.
// Shared by host codecs and kernels; CUDA's __float2half_rn and __float2bfloat16_rn give the
// same bits.
#pragma once

#include <cstdint>

#include "compressors/hd.hpp"

namespace gw::hd {

GW_HD uint16_t float_to_half(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u | ((abs >> 13) & 0x3ffu) : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (abs < 0x38800000u) {                                               // result is subnormal or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);           // below half the smallest subnormal
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exp;  // 14..24
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = ((abs >> 13) - (112u << 10));  // rebias exponent 127 -> 15
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

GW_HD float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return bits_float(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return bits_float(sign);
  uint32_t e = 113u;  // subnormal: normalise
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return bits_float(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

GW_HD uint16_t float_to_bf16(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

GW_HD float bf16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

}  // namespace gw::hd
