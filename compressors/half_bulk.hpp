// Bulk fp32 <-> fp16 conversion for the host codecs: F16C where the CPU has it, the shared
// scalar conversion of half.hpp elsewhere. Both write the same bits (tests check it).
#pragma once

#include <cstdint>

namespace gw::detail {

// out: n little-endian halves at any alignment.
void floats_to_halves(const float* in, uint8_t* out, uint64_t n);
// in: n little-endian halves at any alignment.
void halves_to_floats(const uint8_t* in, float* out, uint64_t n);

}  // namespace gw::detail
