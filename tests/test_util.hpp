// Helpers shared by the tests: synthetic gradients and encode/decode shortcuts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gradwire/codec.hpp"

namespace gw::test {

// Heavy-tailed values (a Student-t-like mix), never exactly zero, reproducible by seed.
std::vector<float> gradient(size_t n, uint64_t seed);

// Encodes with a codec built from spec; fails the test on error.
std::vector<uint8_t> encode(Codec& codec, const std::vector<float>& x, uint64_t step = 0, uint32_t rank = 0);
std::vector<float> decode(const std::vector<uint8_t>& msg, size_t n);
std::unique_ptr<Codec> make_codec(const std::string& spec);

// Awkward sizes every codec test runs over.
const std::vector<size_t>& awkward_sizes();

// ---- Independent references (written from docs/wire-format.md, not from the library). ----

// Bits of a float and back.
uint32_t f32_bits(float f);
float f32_from_bits(uint32_t u);

// IEEE binary16 and bfloat16 conversions computed in double with std::nearbyint (round to
// nearest even), ldexp and frexp: no bit tricks shared with compressors/half.hpp.
// NaN inputs give the quiet NaN 0x7e00 / 0x7fc0 with the input's sign.
uint16_t ref_float_to_half(float f);
float ref_half_to_float(uint16_t h);
uint16_t ref_float_to_bf16(float f);
float ref_bf16_to_float(uint16_t b);

// The wire header's fields, read at the documented offsets.
struct WireFields {
  uint8_t codec = 0;
  uint8_t dtype = 0;
  uint8_t flags = 0;
  uint64_t count = 0;
  uint32_t bits = 0;
  uint32_t bucket = 0;
  uint64_t k = 0;
  uint64_t seed = 0;
  uint64_t step = 0;
  uint64_t payload_bytes = 0;
};
constexpr size_t kWireHeaderBytes = 56;
WireFields read_wire(const std::vector<uint8_t>& msg);

// The indices a topk or dgc message carries (u32 when count <= 2^32, else u64).
std::vector<uint64_t> sparse_indices(const std::vector<uint8_t>& msg);

// k_for(n) as docs/wire-format.md defines it ("Sparse sizes").
uint64_t ref_k_for_ratio(uint64_t n, double ratio);
uint64_t ref_k_for_fixed(uint64_t n, uint64_t k);

// Philox4x32-10 written out from the paper's definition, and a stream word per the
// documented key/counter layout: key = (lo32(seed), hi32(seed) ^ hi32(step)),
// counter = (lo32(i/4), hi32(i/4), rank, lo32(step)), word i % 4.
void ref_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
uint32_t ref_stream_word(uint64_t seed, uint64_t step, uint32_t rank, uint64_t index);

// Positions whose decoded value is not +0 (for sparse messages of inputs without zeros).
std::vector<uint64_t> nonzero_positions(const std::vector<float>& v);

}  // namespace gw::test
