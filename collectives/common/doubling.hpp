// Recursive doubling's exchange schedule for p ranks, shared by the algorithm
// (recursive_doubling_allreduce.cpp) and the call check, which checks exactly its partners.
//
// p = 2^m + e (0 <= e < 2^m). The e even ranks below 2e hand their buffer to the odd rank
// above them (step 0) and get the result back at the end (step m + 1); the other 2^m ranks,
// numbered 0 .. 2^m - 1 among themselves, exchange with the rank whose number differs in bit
// k at step k + 1.
#pragma once

#include <cstdint>

namespace gw::coll {

struct Doubling {
  int pof2 = 1;      // 2^m
  int extra = 0;     // e
  int m = 0;         // exchanges among the 2^m
  int folded = -1;   // an even rank below 2e: the neighbour it hands its buffer to
  int takes = -1;    // an odd rank below 2e: the neighbour whose buffer it takes in
  int newrank = -1;  // this rank's number among the 2^m (-1: folded)

  Doubling(int rank, int p) {
    while (pof2 * 2 <= p) {
      pof2 *= 2;
      ++m;
    }
    extra = p - pof2;
    if (rank < 2 * extra) {
      if (rank % 2 == 0) {
        folded = rank + 1;
      } else {
        takes = rank - 1;
        newrank = rank / 2;
      }
    } else {
      newrank = rank - extra;
    }
  }
  // The rank of number v among the 2^m.
  int rank_of(int v) const { return v < extra ? 2 * v + 1 : v + extra; }
  // This rank's partner at exchange k (0 <= k < m); only for ranks that are not folded.
  int partner(int k) const { return rank_of(newrank ^ (1 << k)); }
};

// Recursive halving over the 2^m owners' segments (halving-doubling, Rabenseifner): at step
// k a rank holding segments [lo, hi) sends the half its partner at distance 2^(m-1-k) keeps
// and keeps the other; after m steps it holds its own segment, newrank.
struct HalvingStep {
  int peer;
  uint64_t send_lo, send_hi, keep_lo, keep_hi;
};
inline HalvingStep halving_step(const Doubling& d, int k, uint64_t lo, uint64_t hi) {
  const uint64_t v = static_cast<uint64_t>(d.newrank);
  const uint64_t dist = static_cast<uint64_t>(d.pof2) >> (k + 1);
  const uint64_t mid = lo + (hi - lo) / 2;
  const bool low = (v & dist) == 0;
  return HalvingStep{d.rank_of(static_cast<int>(v ^ dist)), low ? mid : lo, low ? hi : mid, low ? lo : mid,
                     low ? mid : hi};
}

}  // namespace gw::coll
