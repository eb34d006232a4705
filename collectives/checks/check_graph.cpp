#include "collectives/checks/check_graph.hpp"

#include "collectives/algorithms/algorithm_table.hpp"
#include "collectives/checks/call_descriptor.hpp"

namespace gw::coll {

CheckGraph check_graph(const CallDescriptor& d) {
  if ((d.flags & CallDescriptor::kDevice) != 0) return CheckGraph::kAllPeers;
  switch (d.kind) {
    case CallKind::kAllreduce: {
      const AlgorithmRow* row = find_algorithm(static_cast<Algo>(d.algo));
      if (row == nullptr) return CheckGraph::kAllPeers;
      // No data moves, so none carries a descriptor: the ring edge alone.
      if ((row->check == CheckGraph::kDoubling || row->check == CheckGraph::kRingHead) && d.count == 0) {
        return CheckGraph::kRing;
      }
      return row->check;
    }
    case CallKind::kAllgather:
    case CallKind::kAllgatherv:
    case CallKind::kAllgatherCompressed:  // host: the encoded chunks travel the ring
    case CallKind::kTunerAgreement:
    case CallKind::kReduceScatter: return CheckGraph::kRing;  // ring all-gather and ring reduce-scatter
    case CallKind::kBarrier: return CheckGraph::kDissemination;
    default: return CheckGraph::kAllPeers;
  }
}

}  // namespace gw::coll
