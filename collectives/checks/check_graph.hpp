// Which peers' call descriptors a call checks (docs/architecture.md, "What is checked on the
// wire"). Every call checks the ring edge (rank r - 1's descriptor reaches r, as a message of
// its own): whatever two ranks called, that message is sent and awaited, so a mismatch
// anywhere is found somewhere on the ring and the rank that finds it tells everyone. Beside
// it, every peer a call takes data from must be checked before its data is used:
//   kAllPeers  every other rank, both ways (p - 1 messages each way): the calls whose data
//              edges are not declared, device calls (NCCL's edges are invisible) and rooted
//              calls, so that every rank of a mismatched call fails in that call;
//   kRing      the ring edge alone: algorithms that only receive from r - 1 (ring, compressed
//              ring, ring all-gather). Every output depends on every rank's input along
//              checked edges, so one rank's success means every rank made its call.
//   kRingHead  the ring edge alone, its descriptor riding at the head of the algorithm's first
//              data message to r + 1 (the dense ring all-reduce: no message of its own).
//   kDoubling  the ring edge, and recursive doubling's partners, whose descriptor rides at the
//              head of each data message (CallCheck::carried_bytes).
//   kPartners  the ring edge, and recursive doubling's partners with messages of their own
//              (halving-doubling, whose messages carry no descriptor).
//   kDissemination  rank r - 2^k's descriptor for k = 0, 1, ... (the dissemination barrier's
//              edges), as messages of their own.
#pragma once

#include <cstdint>

namespace gw::coll {

struct CallDescriptor;

enum class CheckGraph : uint8_t { kAllPeers, kRing, kDoubling, kDissemination, kPartners, kRingHead };

// The graph of a call, from what every rank states alike (kind, algorithm, device flag).
CheckGraph check_graph(const CallDescriptor& d);

}  // namespace gw::coll
