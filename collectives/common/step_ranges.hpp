// The step field of a collective's tags (context.hpp: kStepBits, kMaxSteps), cut into the
// ranges the algorithms use. One algorithm calling another hands it a Context whose
// step_base is the start of one of these ranges, so the inner call's tags differ from the
// outer one's. The bases are the values peers expect on the wire: change one and builds
// stop interoperating.
#pragma once

#include <cstdint>

#include "collectives/common/context.hpp"

namespace gw::coll {

struct StepRange {
  const char* what;
  uint32_t base;
  uint32_t size;
  constexpr uint32_t end() const { return base + size; }
  constexpr bool overlaps(const StepRange& o) const { return base < o.end() && o.base < end(); }
};

// The step that carries every call's descriptor (CallCheck::tag): no algorithm uses it.
inline constexpr StepRange kCallCheckSteps{"call descriptors", kMaxSteps - 1, 1};

// A flat algorithm (ring, compressed ring, scatter-reduce, sparse all-gather; the dense
// collectives) numbers its steps from the context's step_base: fewer than 2 x ranks.
inline constexpr StepRange kFlatSteps{"a flat algorithm's steps", 0, 1024};

// Sparse all-gather of variable-length messages: the lengths' all-gather runs on the same
// ring as the messages, in the upper half.
inline constexpr StepRange kGatherMessageSteps{"sparse all-gather: the messages", 0, kMaxSteps / 2};
inline constexpr StepRange kGatherLengthSteps{"sparse all-gather: the lengths", kMaxSteps / 2, kMaxSteps / 2 - 1};
inline constexpr StepRange kSparseAllgatherSteps[] = {kGatherMessageSteps, kGatherLengthSteps};

// The hierarchical all-reduce: its legs, the node segment's handshake and the fence after
// the pipeline. The inter-node leg is cut into pieces of 2 x nodes steps each.
inline constexpr StepRange kHierInNodeSteps{"hierarchical: in-node reduce-scatter", 0, 1024};
inline constexpr StepRange kHierInterSteps{"hierarchical: inter-node leg (pieces of 2 x nodes steps)", 1024, 2048};
inline constexpr StepRange kHierGatherSteps{"hierarchical: in-node all-gather", 3072, 528};
inline constexpr StepRange kNodeShmSteps{"hierarchical: node segment handshake", 3600, 3};
inline constexpr StepRange kHierFenceSteps{"hierarchical: node fence", 3610, 1};
inline constexpr StepRange kHierarchicalSteps[] = {kHierInNodeSteps, kHierInterSteps, kHierGatherSteps, kNodeShmSteps,
                                                   kHierFenceSteps};
// The node segment's handshake, one step each.
inline constexpr uint32_t kNodeShmAnnounceStep = kNodeShmSteps.base;
inline constexpr uint32_t kNodeShmFlagStep = kNodeShmSteps.base + 1;
inline constexpr uint32_t kNodeShmDecisionStep = kNodeShmSteps.base + 2;

// The hierarchical sparse all-gather: the rings inside each node (node j's messages at
// j x local_size), the ring across nodes, and the lengths as the flat gather sends them.
inline constexpr StepRange kHierGatherInNodeSteps{"hierarchical sparse all-gather: in-node rings", 0, 1024};
inline constexpr StepRange kHierGatherAcrossSteps{"hierarchical sparse all-gather: across nodes", 1024, 1024};
inline constexpr StepRange kHierSparseAllgatherSteps[] = {kHierGatherInNodeSteps, kHierGatherAcrossSteps,
                                                          kGatherLengthSteps};

// Whether ranges [first, first + n) are pairwise disjoint and leave the call check's step.
constexpr bool disjoint_below_call_check(const StepRange* first, int n) {
  for (int i = 0; i < n; ++i) {
    if (first[i].size == 0 || first[i].end() > kCallCheckSteps.base) return false;
    for (int j = i + 1; j < n; ++j) {
      if (first[i].overlaps(first[j])) return false;
    }
  }
  return true;
}

static_assert(disjoint_below_call_check(kSparseAllgatherSteps, 2), "sparse all-gather step ranges overlap");
static_assert(disjoint_below_call_check(kHierarchicalSteps, 5), "hierarchical step ranges overlap");
static_assert(disjoint_below_call_check(kHierSparseAllgatherSteps, 3), "hierarchical gather step ranges overlap");

}  // namespace gw::coll
