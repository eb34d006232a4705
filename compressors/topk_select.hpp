// Exact top-k by magnitude with a radix select on the bits of |x|: one histogram pass over
// the top 11 bits, one pass that keeps the certain winners and collects the boundary bin,
// then two small histogram rounds over the boundary bin alone. No sort; two reads of the
// input. Ties at the threshold go to the lower index. Output indices are increasing.
#pragma once

#include <cstdint>

#include "compressors/workspace.hpp"

namespace gw::detail {

// Writes the positions (into [0, n)) of the k largest |x| to out, increasing. Uses
// workspace slots 1 to 3. k <= n.
template <class Idx>
void select_topk(const float* x, uint64_t n, uint64_t k, Idx* out, Workspace& ws);

// The same over a subset: candidates cand[0..c) (increasing indices into x); writes the
// chosen indices (values of cand, increasing) to out. Uses workspace slots 2 and 3.
template <class Idx>
void select_topk_among(const float* x, const Idx* cand, uint64_t c, uint64_t k, Idx* out,
                       Workspace& ws);

}  // namespace gw::detail
