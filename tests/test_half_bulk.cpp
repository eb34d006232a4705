// The bulk fp16 conversions (F16C where present) against the scalar reference of half.hpp,
// which the GPU kernels also follow: every half, and a sweep over float bit patterns.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "compressors/half.hpp"
#include "compressors/half_bulk.hpp"

namespace gw {
namespace {

TEST(HalfBulk, WidensEveryHalfLikeTheScalarConversion) {
  std::vector<uint8_t> in(2 * 65536 + 1);
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t v = static_cast<uint16_t>(h);
    std::memcpy(in.data() + 1 + 2 * h, &v, 2);  // odd address: the payload has no alignment
  }
  std::vector<float> out(65536);
  detail::halves_to_floats(in.data() + 1, out.data(), out.size());
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint32_t want = hd::float_bits(hd::half_to_float(static_cast<uint16_t>(h)));
    ASSERT_EQ(hd::float_bits(out[h]), want) << "half 0x" << std::hex << h;
  }
}

TEST(HalfBulk, NarrowsFloatsLikeTheScalarConversion) {
  // Every 4093rd bit pattern (all exponents, signs, NaNs and subnormals), plus every pattern
  // near the fp16 rounding and overflow boundaries; lengths not a multiple of 8.
  std::vector<float> in;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4093) in.push_back(hd::bits_float(static_cast<uint32_t>(b)));
  for (uint32_t centre : {0x477ff000u, 0x38800000u, 0x33000000u, 0x7f800000u, 0x3f801000u}) {
    for (uint32_t d = 0; d < 4096; ++d) {
      in.push_back(hd::bits_float(centre + d - 2048));
      in.push_back(hd::bits_float((centre + d - 2048) | 0x80000000u));
    }
  }
  in.push_back(1.0f);
  std::vector<uint8_t> out(2 * in.size() + 1);
  detail::floats_to_halves(in.data(), out.data() + 1, in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    uint16_t got;
    std::memcpy(&got, out.data() + 1 + 2 * i, 2);
    ASSERT_EQ(got, hd::float_to_half(in[i])) << "float bits 0x" << std::hex << hd::float_bits(in[i]);
  }
}

}  // namespace
}  // namespace gw
