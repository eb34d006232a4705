#include "collectives/comm/topology.hpp"

#include <map>

namespace gw::coll {

Topology Topology::from_node_of(const std::vector<int>& node_of, int rank) {
  Topology t;
  t.node_of.assign(node_of.size(), 0);
  t.local_of.assign(node_of.size(), 0);
  std::map<int, int> index;  // label -> node number, by first appearance (lowest rank)
  for (size_t r = 0; r < node_of.size(); ++r) {
    auto it = index.find(node_of[r]);
    if (it == index.end()) {
      it = index.emplace(node_of[r], static_cast<int>(t.members.size())).first;
      t.members.emplace_back();
    }
    t.node_of[r] = it->second;
    t.local_of[r] = static_cast<int>(t.members[it->second].size());
    t.members[it->second].push_back(static_cast<int>(r));
  }
  t.nnodes = static_cast<int>(t.members.size());
  if (t.nnodes == 0) return single_node(1, 0);
  t.node = t.node_of[static_cast<size_t>(rank)];
  t.local_rank = t.local_of[static_cast<size_t>(rank)];
  t.local_size = static_cast<int>(t.members[static_cast<size_t>(t.node)].size());
  return t;
}

Topology Topology::from_keys(const std::vector<std::string>& key, int rank) {
  std::map<std::string, int> label;
  std::vector<int> node_of(key.size());
  for (size_t r = 0; r < key.size(); ++r)
    node_of[r] = label.emplace(key[r], static_cast<int>(label.size())).first->second;
  return from_node_of(node_of, rank);
}

Topology Topology::single_node(int nranks, int rank) {
  return from_node_of(std::vector<int>(static_cast<size_t>(nranks), 0), rank);
}

bool Topology::uniform() const {
  for (const auto& m : members) {
    if (m.size() != members[0].size()) return false;
  }
  return true;
}

std::vector<int> Topology::same_local_rank(int l) const {
  std::vector<int> out;
  for (const auto& m : members) {
    if (l < static_cast<int>(m.size())) out.push_back(m[static_cast<size_t>(l)]);
  }
  return out;
}

std::string Topology::describe() const {
  const std::string nodes = std::to_string(nnodes) + (nnodes == 1 ? " node" : " nodes");
  if (uniform()) return nodes + " x " + std::to_string(members.empty() ? 0 : members[0].size()) + " ranks";
  std::string s = nodes + " of ";
  for (size_t i = 0; i < members.size(); ++i) s += (i > 0 ? ", " : "") + std::to_string(members[i].size());
  return s + " ranks";
}

std::string Topology::why_flat() const {
  if (nnodes == 1) return "all ranks share one node";
  if (!uniform()) return "the nodes hold different numbers of ranks";
  if (local_size == 1) return "every node holds one rank";
  return "";
}

}  // namespace gw::coll
