// Sparse all-gather on a hierarchical layout: the messages' lengths go around every rank
// (one u64 each), then each message crosses the inter-node links once per node, not once
// per rank: the ranks with the same local rank gather their messages across nodes (one ring
// per local rank, all at once), then every node's ranks hand each other what they gathered
// (one ring per node of origin). The dense form then decodes every message in global rank
// order, as the flat one does, so both give the same bits.
#include <cstring>
#include <string>
#include <vector>

#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/algorithms/host/allgatherv.hpp"
#include "collectives/comm/topology.hpp"
#include "collectives/common/step_ranges.hpp"
#include "collectives/common/subgroup_transport.hpp"

namespace gw::coll {
namespace {

// Every rank's message at offsets[r] of data (this rank's already there).
Status gather_messages(Context& c, const Topology& t, uint8_t* data, const uint64_t* offsets, const uint64_t* lengths) {
  const int L = t.local_size, N = t.nnodes;
  std::vector<uint64_t> off(static_cast<size_t>(N > L ? N : L)), len(off.size());
  const std::vector<int> across = t.same_local_rank(t.local_rank);
  SubgroupTransport across_tp(c.tp, across, t.node);
  for (int j = 0; j < N; ++j) {
    off[static_cast<size_t>(j)] = offsets[across[static_cast<size_t>(j)]];
    len[static_cast<size_t>(j)] = lengths[across[static_cast<size_t>(j)]];
  }
  Context x = in_group(c, across_tp, t.node, N, kHierGatherAcrossSteps.base);
  GW_RETURN_IF_ERROR(ring_allgatherv(x, data, off.data(), len.data()));
  const std::vector<int>& mine = t.members[static_cast<size_t>(t.node)];
  SubgroupTransport node_tp(c.tp, mine, t.local_rank);
  for (int j = 0; j < N; ++j) {
    const std::vector<int>& theirs = t.members[static_cast<size_t>(j)];
    for (int r = 0; r < L; ++r) {
      off[static_cast<size_t>(r)] = offsets[theirs[static_cast<size_t>(r)]];
      len[static_cast<size_t>(r)] = lengths[theirs[static_cast<size_t>(r)]];
    }
    Context in_node = in_group(c, node_tp, t.local_rank, L, kHierGatherInNodeSteps.base + static_cast<uint32_t>(j * L));
    GW_RETURN_IF_ERROR(ring_allgatherv(in_node, data, off.data(), len.data()));
  }
  return Status::ok();
}

}  // namespace

Status hierarchical_sparse_allgather(Context& c, const Topology& t, const void* msg, size_t len, void* out,
                                     size_t capacity, size_t* lengths_out, bool* fits) {
  auto* offsets = c.scratch.bytes.get<uint64_t>(4, static_cast<size_t>(c.size));
  auto* lengths = c.scratch.bytes.get<uint64_t>(5, static_cast<size_t>(c.size));
  GW_ASSIGN_OR_RETURN(uint64_t total, gather_layout(c, len, offsets, lengths));
  *fits = total <= capacity;
  auto* data = *fits ? static_cast<uint8_t*>(out) : c.scratch.bytes.get<uint8_t>(3, total);
  if (len > 0) std::memmove(data + offsets[c.rank], msg, len);
  GW_RETURN_IF_ERROR(gather_messages(c, t, data, offsets, lengths));
  for (int r = 0; r < c.size; ++r) lengths_out[r] = lengths[r];
  return Status::ok();
}

Status hierarchical_sparse_allgather_dense(Context& c, const Topology& t, const void* msg, size_t len, float* dense,
                                           size_t n) {
  auto* offsets = c.scratch.bytes.get<uint64_t>(4, static_cast<size_t>(c.size));
  auto* lengths = c.scratch.bytes.get<uint64_t>(5, static_cast<size_t>(c.size));
  GW_ASSIGN_OR_RETURN(uint64_t total, gather_layout(c, len, offsets, lengths));
  GW_RETURN_IF_ERROR(check_messages_total(total, n, c.size));
  auto* data = c.scratch.bytes.get<uint8_t>(3, total);
  if (len > 0) std::memmove(data + offsets[c.rank], msg, len);
  GW_RETURN_IF_ERROR(gather_messages(c, t, data, offsets, lengths));
  if (n > 0) std::memset(dense, 0, n * sizeof(float));
  for (int r = 0; r < c.size; ++r) {
    GW_RETURN_IF_ERROR(timed_decode(c, data + offsets[r], lengths[r], dense, n, DecodeMode::kAccumulate)
                           .with_context("message of rank " + std::to_string(r)));
  }
  return Status::ok();
}

}  // namespace gw::coll
