// Philox-4x32-10 (Salmon et al., SC'11): a counter-based generator, so any element's
// random word can be computed independently, in any order, on host or device.
// gradwire's stream: key = (lo32(seed), hi32(seed) ^ hi32(step)),
// counter = (lo32(block), hi32(block), rank, lo32(step)); block = index / 4 and the
// element takes word index % 4 of that block. See docs/wire-format.md.
#pragma once

#include <cstdint>

#include "compressors/hd.hpp"

namespace gw {

struct Philox4 {
  uint32_t v[4];
};

GW_HD void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

GW_HD Philox4 philox4x32_10(Philox4 ctr, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(0xD2511F53u, ctr.v[0], hi0, lo0);
    philox_mulhilo(0xCD9E8D57u, ctr.v[2], hi1, lo1);
    ctr = Philox4{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return ctr;
}

// Rank value reserved for streams that every rank must share (random-k indices).
constexpr uint32_t kSharedStreamRank = 0xFFFFFFFFu;

struct RandomStream {
  uint64_t seed;
  uint64_t step;
  uint32_t rank;

  // The four words of block `block`.
  GW_HD Philox4 block(uint64_t block_index) const {
    const Philox4 ctr{{static_cast<uint32_t>(block_index), static_cast<uint32_t>(block_index >> 32),
                       rank, static_cast<uint32_t>(step)}};
    return philox4x32_10(ctr, static_cast<uint32_t>(seed),
                         static_cast<uint32_t>(seed >> 32) ^ static_cast<uint32_t>(step >> 32));
  }
  GW_HD uint32_t word(uint64_t index) const { return block(index >> 2).v[index & 3]; }
};

// Uniform float in [0, 1) from the top 24 bits of a word: exact in fp32.
GW_HD float uniform01(uint32_t w) { return static_cast<float>(w >> 8) * (1.0f / 16777216.0f); }

}  // namespace gw

namespace gw {

// Host helper: the random words of elements [first, first + count) into out, where first is
// a multiple of 4. Generating whole blocks in a tight loop lets the compiler vectorize it.
inline void philox_fill(const RandomStream& rs, uint64_t first, uint32_t* out, uint64_t count) {
  const uint64_t blocks = (count + 3) / 4;
  const uint64_t first_block = first >> 2;
  for (uint64_t b = 0; b < blocks; ++b) {
    const Philox4 r = rs.block(first_block + b);
    out[4 * b + 0] = r.v[0];
    out[4 * b + 1] = r.v[1];
    out[4 * b + 2] = r.v[2];
    out[4 * b + 3] = r.v[3];
  }
}

}  // namespace gw
