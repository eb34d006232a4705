// fp32 <-> fp16 / bf16 conversions, round to nearest even, NaN kept NaN, overflow to inf.
// Shared by host codecs and kernels; CUDA's __float2half_rn and __float2bfloat16_rn give the
// same bits. Below them, stochastic rounding (the *_sr functions) from a random word.
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

// ---- Stochastic rounding (unbiased) ----
// A finite x between the neighbours lo and hi of the narrow type (|lo| < |x| < |hi|, same sign)
// goes to hi, away from zero, when r < frac, with frac = floor(2^32 * (|x| - |lo|) / (|hi| - |lo|))
// and r the element's random word; else to lo. So P(hi) = (|x| - |lo|) / (|hi| - |lo|) and
// E[result] = x: exactly for bf16 (16 dropped bits) and for fp16 down to |x| = 2^-33 (below that
// frac is truncated to 32 bits, an error under 2^-56 in absolute value). A representable x
// (frac = 0) never changes, -0 stays -0, infinities stay, NaN is converted as by the nearest
// conversion (sign and top payload bits kept, quiet). Overflow: the value one step above the
// largest finite one (bf16: 2^128, fp16: 65536) counts as the next neighbour and is infinity,
// so x between the largest finite and that value becomes infinity with the probability of any
// other round-up, and from that value on always (nearest: from halfway).

GW_HD uint16_t float_to_bf16_sr(float f, uint32_t r) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return float_to_bf16(f);
  // r < (x & 0xffff) << 16, on the top 16 bits of r; a carry into the exponent is the next
  // binade (or infinity), as the bit patterns are ordered like the magnitudes.
  return static_cast<uint16_t>((x >> 16) + ((r >> 16) < (x & 0xffffu) ? 1u : 0u));
}

GW_HD uint16_t float_to_half_sr(float f, uint32_t r) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return float_to_half(f);                       // inf or NaN
  if (abs >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7c00u);  // 65536 and up
  if (abs >= 0x38800000u) {                                              // normal (or up to infinity)
    const uint32_t h = (abs >> 13) - (112u << 10);
    return static_cast<uint16_t>(sign | (h + ((r >> 19) < (abs & 0x1fffu) ? 1u : 0u)));
  }
  // Subnormal or zero: |x| in units of 2^-24 (the subnormal step) as 32.32 fixed point.
  const uint32_t exp = abs >> 23;
  const uint64_t mant = (abs & 0x7fffffu) | (exp != 0 ? 0x800000u : 0u);
  const uint32_t shift = 126u - (exp != 0 ? exp : 1u);  // 14 .. 125
  const uint64_t fixed = shift <= 32u ? mant << (32u - shift) : (shift < 56u ? mant >> (shift - 32u) : 0u);
  const uint32_t h = static_cast<uint32_t>(fixed >> 32);
  return static_cast<uint16_t>(sign | (h + (r < static_cast<uint32_t>(fixed) ? 1u : 0u)));
}

}  // namespace gw::hd
