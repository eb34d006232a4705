// Stratified sampling: [0, n) is cut into m strata of near-equal length (the first n % m
// one longer), and stratum j yields one index drawn uniformly inside it from word pair j of
// the stream. Indices come out strictly increasing and each costs O(1), independently, which
// is what a GPU thread needs. random-k uses it for its shared indices, dgc for its sample.
#pragma once

#include <cstdint>

#include "compressors/hd.hpp"
#include "compressors/philox.hpp"

namespace gw {

GW_HD uint64_t stratum_start(uint64_t j, uint64_t n, uint64_t m) {
  const uint64_t q = n / m, r = n % m;
  return j * q + (j < r ? j : r);
}

GW_HD uint64_t stratified_index(const RandomStream& rs, uint64_t j, uint64_t n, uint64_t m) {
  const uint64_t q = n / m, r = n % m;
  const uint64_t start = j * q + (j < r ? j : r);
  const uint64_t len = q + (j < r ? 1 : 0);
  const Philox4 b = rs.block(j >> 1);
  const uint32_t lo = (j & 1) ? b.v[2] : b.v[0];
  const uint32_t hi = (j & 1) ? b.v[3] : b.v[1];
  const uint64_t word = (static_cast<uint64_t>(hi) << 32) | lo;
  return start + hd::mulhi64(word, len);
}

}  // namespace gw
