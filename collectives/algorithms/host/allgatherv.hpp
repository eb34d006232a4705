#pragma once

#include <cstdint>

#include "collectives/common/context.hpp"

namespace gw::coll {

// Ring all-gather in place: block r is data[offsets[r], offsets[r] + lengths[r]); this
// rank's block must already be there. Every rank must pass the same offsets and lengths.
Status ring_allgatherv(Context& c, uint8_t* data, const uint64_t* offsets, const uint64_t* lengths);

// Sparse all-gather's first step: every rank's message length (an all-gather of one u64 each,
// in its own step range), laid out back to back in rank order; returns the total.
Result<uint64_t> gather_layout(Context& c, size_t len, uint64_t* offsets, uint64_t* lengths);
// kRemote when the messages total more than any codec needs for n elements on each rank.
Status check_messages_total(uint64_t total, size_t n, int nranks);

}  // namespace gw::coll
