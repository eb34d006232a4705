// Exact top-k by magnitude with a radix select on the bits of |x|: one histogram pass over
// the top 11 bits, one pass that keeps the certain winners and collects the boundary bin,
// then two small histogram rounds over the boundary bin alone. No sort; two reads of the
// input. Ties at the threshold go to the lower index. Output indices are increasing.
#pragma once

#include <cstdint>

#include "compressors/workspace.hpp"

#include <cstddef>

namespace gw::detail {

// Writes the positions (into [0, n)) of the k largest |x| to out, increasing. Uses
// workspace slots 1 to 3. k <= n.
template <class Idx>
void select_topk(const float* x, uint64_t n, uint64_t k, Idx* out, Workspace& ws);

// Appends to cand, in index order, every position of x whose magnitude key is at least lo,
// and returns how many there are; stops early and returns a count above cap once there are
// more than cap. cand needs room for cap + kCollectSlack elements. One read of x, vectorized
// (AVX2 or AVX-512 where the CPU has them).
constexpr uint64_t kCollectSlack = 17;
template <class Idx>
uint64_t collect_at_least(const float* x, uint64_t n, uint32_t lo, Idx* cand, uint64_t cap);

// Exact top-k, the same result as select_topk, usually in one pass over x instead of two:
// a sample of x (strided, about 64 expected winners) gives a key that at least k and at
// most 4k + 1024 elements reach with high probability; one collecting pass keeps those, and
// the exact selection among them is the exact top k (everything left out is below each of
// them; ties keep index order). When the sample misleads (too few or too many), select_topk
// runs instead: the result never depends on the sample, only the time. Uses slots 1 to 5.
template <class Idx>
void select_topk_sampled(const float* x, uint64_t n, uint64_t k, Idx* out, Workspace& ws);
// The same on x + add, which is left in x: the addition rides on the collecting pass.
template <class Idx>
void select_topk_sampled(float* x, const float* add, uint64_t n, uint64_t k, Idx* out, Workspace& ws);

// x += add, with collect_at_least's result on the sums (the addition always covers all of x).
template <class Idx>
uint64_t add_and_collect_at_least(float* acc, const float* add, uint64_t n, uint32_t lo, Idx* cand, uint64_t cap);

// The same over a subset: candidates cand[0..c) (increasing indices into x); writes the
// chosen indices (values of cand, increasing) to out. Uses workspace slots 2 and 3.
template <class Idx>
void select_topk_among(const float* x, const Idx* cand, uint64_t c, uint64_t k, Idx* out, Workspace& ws);

}  // namespace gw::detail
