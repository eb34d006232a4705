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
std::vector<uint8_t> encode(Codec& codec, const std::vector<float>& x, uint64_t step = 0,
                            uint32_t rank = 0);
std::vector<float> decode(const std::vector<uint8_t>& msg, size_t n);
std::unique_ptr<Codec> make_codec(const std::string& spec);

// Awkward sizes every codec test runs over.
const std::vector<size_t>& awkward_sizes();

}  // namespace gw::test
