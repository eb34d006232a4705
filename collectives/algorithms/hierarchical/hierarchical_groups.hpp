// What the hierarchical all-reduce on host and on device buffers (hierarchical_allreduce.cpp,
// device_hierarchical_allreduce.cpp) share: the groups it runs in (this rank's node, and the
// ranks that hold the same shard on every node), each with the call's context in its own
// step range (step_ranges.hpp), and this rank's shard.
#pragma once

#include <cstdint>
#include <vector>

#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/comm/topology.hpp"
#include "collectives/common/step_ranges.hpp"
#include "collectives/common/subgroup_transport.hpp"

namespace gw::coll {

struct HierarchicalGroups {
  HierarchicalGroups(const Context& c, const Topology& t, uint64_t n)
      : part{n, static_cast<uint64_t>(t.local_size)},
        start(part.start(static_cast<uint64_t>(t.local_rank))),
        len(part.length(static_cast<uint64_t>(t.local_rank))),
        node_tp(c.tp, t.members[static_cast<size_t>(t.node)], t.local_rank),
        across_tp(c.tp, t.same_local_rank(t.local_rank), t.node),
        in_node(in_group(c, node_tp, t.local_rank, t.local_size, kHierInNodeSteps.base)),
        across(in_group(c, across_tp, t.node, t.nnodes, kHierInterSteps.base)),
        gather(in_group(c, node_tp, t.local_rank, t.local_size, kHierGatherSteps.base)) {}
  HierarchicalGroups(const HierarchicalGroups&) = delete;
  HierarchicalGroups& operator=(const HierarchicalGroups&) = delete;

  // The all-gather inside the node: every local rank's shard (es-byte elements, this rank's
  // at shard) into its place in out.
  Status gather_shards(const void* shard, void* out, size_t es) {
    std::vector<uint64_t> displs(part.parts), lengths(part.parts);
    for (uint64_t r = 0; r < part.parts; ++r) {
      displs[r] = part.start(r) * es;
      lengths[r] = part.length(r) * es;
    }
    return allgatherv(gather, shard, out, displs.data(), lengths.data());
  }

  const Partition part;       // the node's shards of the n elements, one per local rank
  const uint64_t start, len;  // this rank's shard
  SubgroupTransport node_tp, across_tp;
  Context in_node, across, gather;
};

}  // namespace gw::coll
