// Which scratch slots each kind of algorithm may use: the host Workspace of Scratch::bytes,
// and the device backend's device_scratch and host_staging blocks. An algorithm that runs
// another inside itself keeps its buffers in slots the inner one never touches.
#pragma once

#include <cstdint>

namespace gw::coll {

struct SlotRange {
  int base;
  int count;
  constexpr int end() const { return base + count; }
  constexpr uint32_t mask() const { return ((uint32_t{1} << count) - 1) << base; }
};

// Host (Scratch::bytes). A flat all-reduce, reduce-scatter or reduce, or a sparse
// all-gather's messages and layout, owns slots 0-5 while it runs; the all-gathers' and
// all-to-alls' layout arrays sit above, free while the sparse all-gather calls an all-gather.
inline constexpr SlotRange kFlatHostSlots{0, 6};
inline constexpr SlotRange kLayoutHostSlots{6, 2};
inline constexpr int kLayoutOffsetsSlot = kLayoutHostSlots.base;
inline constexpr int kLayoutLengthsSlot = kLayoutHostSlots.base + 1;

// Device backend. The flat device algorithms own device blocks 0-4 and staging blocks 0-2;
// the hierarchical all-reduce runs one of them as its inter-node leg and keeps its own
// buffers above.
inline constexpr SlotRange kFlatDeviceSlots{0, 5};
inline constexpr SlotRange kFlatStagingSlots{0, 3};
inline constexpr SlotRange kHierDeviceSlots{5, 3};
inline constexpr SlotRange kHierStagingSlots{3, 1};

static_assert((kFlatHostSlots.mask() & kLayoutHostSlots.mask()) == 0, "host scratch slots overlap");
static_assert((kFlatDeviceSlots.mask() & kHierDeviceSlots.mask()) == 0, "device scratch slots overlap");
static_assert((kFlatStagingSlots.mask() & kHierStagingSlots.mask()) == 0, "staging slots overlap");

}  // namespace gw::coll
