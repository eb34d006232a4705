#pragma once

#include <cstdint>

#include "collectives/context.hpp"

namespace gw::coll {

// Ring all-gather in place: block r is data[offsets[r], offsets[r] + lengths[r]); this
// rank's block must already be there. Every rank must pass the same offsets and lengths.
Status ring_allgatherv(Context& c, uint8_t* data, const uint64_t* offsets, const uint64_t* lengths);

}  // namespace gw::coll
