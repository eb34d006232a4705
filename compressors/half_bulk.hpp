// Bulk fp32 <-> fp16 conversion for the host codecs: F16C where the CPU has it, the shared
// scalar conversion of half.hpp elsewhere. Both write the same bits (tests check it). And the
// bulk stochastic rounding of fp32 to fp16 or bf16 (half.hpp's *_sr), AVX2 where present.
#pragma once

#include <cstdint>

#include "compressors/philox.hpp"

namespace gw::detail {

// out: n little-endian halves at any alignment.
void floats_to_halves(const float* in, uint8_t* out, uint64_t n);
// in: n little-endian halves at any alignment.
void halves_to_floats(const uint8_t* in, float* out, uint64_t n);

// Stochastic rounding of in[0, n) into n little-endian fp16 (bf16) values at any alignment:
// in[j] is rounded with word first + j of rs (first a multiple of 4), as
// hd::float_to_half_sr (hd::float_to_bf16_sr) does, bit for bit at every SIMD level.
void floats_to_halves_sr(const float* in, uint8_t* out, uint64_t n, const RandomStream& rs, uint64_t first);
void floats_to_bf16_sr(const float* in, uint8_t* out, uint64_t n, const RandomStream& rs, uint64_t first);

}  // namespace gw::detail
