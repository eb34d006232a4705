// Which ranks share a node, learned at bootstrap (host identities, transport/topology/), and
// the groups the hierarchical all-reduce runs in: the ranks of one node, and the ranks that
// hold the same local rank on every node.
#pragma once

#include <string>
#include <vector>

#include "gradwire/status.hpp"

namespace gw::coll {

struct Topology {
  int nnodes = 1;
  int node = 0;        // this rank's node
  int local_rank = 0;  // index among its node's ranks (in global rank order)
  int local_size = 1;
  std::vector<int> node_of;               // per global rank
  std::vector<int> local_of;              // per global rank
  std::vector<std::vector<int>> members;  // per node, its global ranks in ascending order

  // key[r]: any label, equal for ranks on one node. Nodes are numbered by their lowest rank.
  static Topology from_keys(const std::vector<std::string>& key, int rank);
  static Topology from_node_of(const std::vector<int>& node_of, int rank);
  static Topology single_node(int nranks, int rank);

  // Every node holds the same number of ranks.
  bool uniform() const;
  // The hierarchical all-reduce applies: more than one node, more than one rank per node,
  // the same number on each.
  bool hierarchical() const { return nnodes > 1 && local_size > 1 && uniform(); }
  // The ranks with local rank l, one per node in node order (uniform layouts only).
  std::vector<int> same_local_rank(int l) const;
  // "2 nodes x 3 ranks", "3 nodes of 1, 2, 1 ranks".
  std::string describe() const;
  // Why hierarchical() is false, for the log ("" when it is true).
  std::string why_flat() const;
};

}  // namespace gw::coll
